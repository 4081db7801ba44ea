#!/usr/bin/env bash
# deploy/image/build.sh: builds the OCI image with buildah (a private store, vfs: no overlayfs,
# no daemon) from this build, writes it as an OCI archive, and the image is what the Kubernetes
# manifests expect: the archive's config (entrypoint, port, labels) and its one layer, unpacked
# and started in a mount namespace with the node's /proc, /sys and /dev (as a hostPID pod sees
# them): --version, check-config of its config, and a short observe-mode start whose /metrics
# and /status answer, stopped with SIGTERM. Prints how long the build took and the sizes.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
daemon=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2> /dev/null
  # The unpacked tree's mounts live in the daemon's mount namespace: gone with it.
  rm -rf "$tmp"
}
trap cleanup EXIT
build=$(cd "$BIN/.." && pwd)
[[ $(id -u) -eq 0 ]] || skip "needs root (chroot, mount namespaces, buildah's store)"
command -v buildah > /dev/null || skip "buildah is not installed (scripts/setup.sh)"
unshare --mount true 2> /dev/null || skip "no mount namespaces here (unshare --mount failed)"
image=$(bash "$SRC/deploy/image/build.sh" --print-image)

export BUILDAH_ARGS="--root $tmp/store --runroot $tmp/runroot --storage-driver vfs"
start=$EPOCHREALTIME
if bash "$SRC/deploy/image/build.sh" --build-dir "$build" --oci-archive "$tmp/image.tar" > "$tmp/build.log" 2>&1; then
  pass
else
  fail "deploy/image/build.sh: $(tail -5 "$tmp/build.log")"
  summary
  exit 1
fi
secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$EPOCHREALTIME")
cat "$tmp/build.log"
echo "image build: ${secs} s"
# shellcheck disable=SC2086
check "buildah lists $image" "buildah $BUILDAH_ARGS images --format '{{.Name}}:{{.Tag}}' | grep -qx 'localhost/$image\\|$image'"

# The archive: OCI layout, one manifest, its config and layers, unpacked to $tmp/root.
mkdir -p "$tmp/oci" "$tmp/root"
tar -xf "$tmp/image.tar" -C "$tmp/oci"
python3 - "$tmp/oci" "$tmp/root" "$image" > "$tmp/oci.txt" 2>&1 <<'PY' && pass || fail "the OCI archive: $(cat "$tmp/oci.txt")"
import json, sys, tarfile, os
oci, root, image = sys.argv[1:]
def blob(d): return os.path.join(oci, "blobs", *d["digest"].split(":"))
index = json.load(open(os.path.join(oci, "index.json")))
(m,) = index["manifests"]
assert m["annotations"]["org.opencontainers.image.ref.name"].endswith(image.split(":")[-1]), m
manifest = json.load(open(blob(m)))
config = json.load(open(blob(manifest["config"])))
c = config["config"]
assert c["Entrypoint"] == ["/usr/bin/zernel-scheduler"], c
assert c["Cmd"] == ["--config", "/etc/zernel/scheduler.toml"], c
assert "9093/tcp" in c["ExposedPorts"], c
assert c["Labels"]["org.opencontainers.image.version"] == image.split(":")[-1]
assert config["architecture"] == "amd64" and config["os"] == "linux"
assert len(manifest["layers"]) == 1, manifest["layers"]
for layer in manifest["layers"]:
    with tarfile.open(blob(layer)) as t:
        t.extractall(root)
print("layers", len(manifest["layers"]), "size", sum(l["size"] for l in manifest["layers"]))
PY
cat "$tmp/oci.txt"
r="$tmp/root"
check "the image has the binary" "[[ -x $r/usr/bin/zernel-scheduler ]]"
check "the image has the example config at /etc/zernel/scheduler.toml" "cmp -s $r/etc/zernel/scheduler.toml \"$SRC/deploy/scheduler.toml\""
check "the image has no shell (nothing but the daemon and its libraries)" "[[ ! -e $r/bin/sh && ! -e $r/usr/bin/sh ]]"
check "the image's binary is stripped (no .symtab)" "! readelf -S $r/usr/bin/zernel-scheduler | grep -q '\\.symtab'"
echo "image tree: $(du -sh "$r" | cut -f1), files: $(find "$r" -type f | wc -l)"

# in_image CMD...: CMD in the unpacked image, in a mount namespace with /proc, /sys, /dev bound
# from the node and tmpfs on /tmp and /run/zernel. unshare, bash and chroot exec each other: the
# pid of `in_image ... &` is that of CMD.
in_image_script='r=$1; shift
  mount --rbind /proc "$r/proc" && mount --rbind /sys "$r/sys" && mount --rbind /dev "$r/dev" &&
  mount -t tmpfs tmpfs "$r/tmp" && mount -t tmpfs -o mode=0700 tmpfs "$r/run/zernel" &&
  exec chroot "$r" "$@"'
in_image() { exec unshare --mount bash -c "$in_image_script" _ "$r" "$@"; }
check "zernel-scheduler --version in the image" \
  "(in_image /usr/bin/zernel-scheduler --version) | grep -qx 'zernel-scheduler ${image##*:}'"
check "check-config of the image's config in the image" \
  "(in_image /usr/bin/zernel-scheduler check-config /etc/zernel/scheduler.toml) | grep -q OK"

port=$(free_port)
sed "s/^metrics_port = .*/metrics_port = $port/" "$r/etc/zernel/scheduler.toml" > "$r/etc/zernel/test.toml"
(in_image /usr/bin/zernel-scheduler --config /etc/zernel/test.toml --backend observe) > "$tmp/daemon.log" 2>&1 &
daemon=$!
check "observe-mode start in the image: /metrics answers on 127.0.0.1:$port" \
  "wait_for 20 \"curl -sf http://127.0.0.1:$port/metrics 2>/dev/null | grep -q 'zernel_scheduler_backend_info{backend=\\\"observe\\\"} 1'\""
check "/status answers: backend observe" \
  "curl -sf http://127.0.0.1:$port/status > $tmp/status.json && grep -q '\"backend\": \"observe\"' $tmp/status.json"
kill -TERM "$daemon"
check "SIGTERM stops it with status 0" "wait $daemon"
daemon=""
echo "--- daemon log"
cat "$tmp/daemon.log"

summary
