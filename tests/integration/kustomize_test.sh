#!/usr/bin/env bash
# deploy/kubernetes: every overlay renders with `kubectl kustomize` (kubectl 1.20's kustomize
# v2.0.3, Debian's, as well as current ones) and the result is what the docs promise: the kinds,
# one namespace, no privileged container but the capabilities listed for its backend, hostPID
# without hostNetwork, the mounts (pod-resources read-only), a NetworkPolicy that admits only the
# metrics port, a ServiceMonitor on the Service's port, the image deploy/image/build.sh tags, and
# a config that passes check-config and differs from deploy/scheduler.toml only in metrics_address.
# KUBECTL=path picks the kubectl (default: the one on PATH).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$tmp"' EXIT
Z="$BIN/zernel-scheduler"
K=${KUBECTL:-kubectl}
command -v "$K" > /dev/null || skip "no kubectl (Debian: kubernetes-client; scripts/setup.sh)"
python3 -c 'import yaml' 2> /dev/null || skip "python3-yaml is not installed"
version=$("$Z" --version | awk '{print $2}')
# The image name and tag deploy/image/build.sh gives the image.
image=$(bash "$SRC/deploy/image/build.sh" --print-image)
check "build.sh tags the image with the project's version ($image)" "[[ $image == *:$version ]]"

declare -A caps=(
  [observe]="DAC_READ_SEARCH SYS_PTRACE BPF PERFMON SYS_ADMIN"
  [userspace]="DAC_READ_SEARCH SYS_PTRACE BPF PERFMON SYS_ADMIN SYS_NICE"
  [sched-ext]="DAC_READ_SEARCH SYS_PTRACE BPF PERFMON SYS_NICE SYS_ADMIN"
)
declare -A backend=([observe]=observe [userspace]=userspace [sched-ext]=sched_ext)
declare -A sys_ro=([observe]=True [userspace]=False [sched-ext]=False)

overlays=$(cd "$SRC/deploy/kubernetes/overlays" && ls)
check "the overlays are observe, sched-ext, userspace" "[[ \"$(echo $overlays)\" == 'observe sched-ext userspace' ]]"
for o in $overlays; do
  out="$tmp/$o.yaml"
  if ! "$K" kustomize "$SRC/deploy/kubernetes/overlays/$o" > "$out" 2> "$tmp/$o.err"; then
    fail "kubectl kustomize overlays/$o: $(cat "$tmp/$o.err")"
    continue
  fi
  pass
  check "overlays/$o: no 'privileged: true' anywhere" "! grep -q 'privileged: true' $out"
  python3 - "$out" "$o" "${caps[$o]}" "${backend[$o]}" "${sys_ro[$o]}" "$image" "$tmp/$o.toml" <<'PY' &&
import sys, yaml
path, overlay, caps, backend, sys_ro, image, toml_out = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
by_kind = {}
for d in docs:
    assert d["kind"] not in by_kind, f"two {d['kind']}"
    by_kind[d["kind"]] = d
# The config first: the checks after this script use it whatever fails below.
if "ConfigMap" in by_kind:
    open(toml_out, "w").write(by_kind["ConfigMap"]["data"]["scheduler.toml"])
kinds = sorted(by_kind)
assert kinds == sorted(["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet", "Service",
                        "NetworkPolicy", "ServiceMonitor"]), kinds
for d in docs:
    if d["kind"] != "Namespace":
        assert d["metadata"]["namespace"] == "zernel-system", d["kind"]
assert by_kind["Namespace"]["metadata"]["name"] == "zernel-system"
ds = by_kind["DaemonSet"]
pod = ds["spec"]["template"]
spec = pod["spec"]
labels = pod["metadata"]["labels"]
assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
assert spec["hostPID"] is True
assert not spec.get("hostNetwork"), "hostNetwork: the NetworkPolicy would not apply"
assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
assert spec["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"]
assert spec["automountServiceAccountToken"] is False
(c,) = spec["containers"]
assert c["image"] == image, (c["image"], image)
assert c["command"] == ["/usr/bin/zernel-scheduler"]
assert c["args"] == ["--config", "/etc/zernel/scheduler.toml", "--backend", backend], c["args"]
sc = c["securityContext"]
assert sc.get("privileged") is False and sc["allowPrivilegeEscalation"] is False
assert sc["capabilities"]["drop"] == ["ALL"]
assert sc["capabilities"]["add"] == caps.split(), (sc["capabilities"]["add"], caps)
assert sc["readOnlyRootFilesystem"] is True
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
for p in ["/etc/zernel", "/sys", "/run/zernel", "/var/lib/zernel", "/var/lib/kubelet/pod-resources"]:
    assert p in mounts, p
assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
assert mounts["/etc/zernel"]["readOnly"] is True
assert str(bool(mounts["/sys"].get("readOnly"))) == sys_ro, ("/sys readOnly", mounts["/sys"])
volumes = {v["name"]: v for v in spec["volumes"]}
host = {volumes[m["name"]]["hostPath"]["path"]: p for p, m in mounts.items()
        if "hostPath" in volumes[m["name"]]}
assert host == {"/sys": "/sys", "/run/zernel": "/run/zernel", "/var/lib/zernel": "/var/lib/zernel",
                "/var/lib/kubelet/pod-resources": "/var/lib/kubelet/pod-resources"}, host
cm = by_kind["ConfigMap"]
assert volumes[mounts["/etc/zernel"]["name"]]["configMap"]["name"] == cm["metadata"]["name"]
(port,) = c["ports"]
assert port["name"] == "metrics" and port["containerPort"] == 9093 and "hostPort" not in port
assert c["livenessProbe"]["httpGet"]["path"] == "/metrics"
svc = by_kind["Service"]
assert svc["spec"]["selector"].items() <= labels.items()
assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("metrics", 9093)]
np = by_kind["NetworkPolicy"]["spec"]
assert np["podSelector"]["matchLabels"].items() <= labels.items()
assert sorted(np["policyTypes"]) == ["Egress", "Ingress"] and not np.get("egress")
(rule,) = np["ingress"]
assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}], rule["ports"]
assert rule["from"] and all("namespaceSelector" in f for f in rule["from"])
sm = by_kind["ServiceMonitor"]
assert sm["apiVersion"] == "monitoring.coreos.com/v1"
assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
assert sm["spec"]["namespaceSelector"]["matchNames"] == ["zernel-system"]
PY
    pass || fail "overlays/$o: the rendered objects are not as required (the assertion above)"
  # Its one warning is the one expected: /metrics on a non-loopback address.
  check "overlays/$o: the ConfigMap's config passes check-config" \
    "\"$Z\" check-config $tmp/$o.toml > $tmp/$o.check 2>&1 &&
     ! grep warning $tmp/$o.check | grep -vq 'metrics_address: \"0.0.0.0\" is not a loopback address'"
  changed=$(diff <(grep -v '^#' "$SRC/deploy/scheduler.toml") <(grep -v '^#' "$tmp/$o.toml") | grep '^[<>]')
  expected=$'< metrics_address = "127.0.0.1"\n> metrics_address = "0.0.0.0"'
  if [[ $changed == "$expected" ]]; then
    pass
  else
    fail "overlays/$o: the config differs from deploy/scheduler.toml in more than metrics_address: $changed"
  fi
  check "overlays/$o: the daemon listens on 0.0.0.0:9093 with it" \
    "\"$Z\" --config $tmp/$o.toml --dump-config 2>/dev/null | grep -qx 'metrics_address = \"0.0.0.0\"' &&
     \"$Z\" --config $tmp/$o.toml --dump-config 2>/dev/null | grep -qx 'metrics_port = 9093'"
done

summary
