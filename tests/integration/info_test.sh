#!/usr/bin/env bash
# `zernel-scheduler info`: the text report names every fact, --json is one object with the same
# facts as this machine has them (kernel release, BTF, delay accounting, CPUs), and the emulated
# GPU's NVML lists its GPUs with bus ids.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-info-test-$$"
cleanup() {
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

"$BIN/zernel-scheduler" info > "$tmp/info.txt" 2> "$tmp/info.err"
rc=$?
check "info exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
for label in "kernel:" "sched_ext:" "BTF:" "cgroup:" "NVML:" "sysfs GPUs:" "CPUs:" "delay accounting:"; do
  check "text report has '$label'" "grep -q '^$label' $tmp/info.txt"
done
check "text report names the kernel release" "grep -qF \"$(uname -r)\" $tmp/info.txt"

"$BIN/zernel-scheduler" info --json > "$tmp/info.json" 2> "$tmp/info_json.err"
rc=$?
check "info --json exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
python3 - "$tmp/info.json" <<'PY' && pass || fail "info --json matches this machine"
import json, os, platform, sys
j = json.load(open(sys.argv[1]))
assert set(j) >= {"version", "kernel", "sched_ext", "btf", "cgroup", "nvml", "topology", "delay_accounting"}, sorted(j)
assert j["kernel"]["release"] == platform.release(), j["kernel"]
assert j["btf"]["available"] == os.path.exists("/sys/kernel/btf/vmlinux")
assert j["sched_ext"]["supported"] == os.path.isdir("/sys/kernel/sched_ext")
if j["sched_ext"]["supported"]:
    assert j["sched_ext"]["state"] == open("/sys/kernel/sched_ext/state").read().strip()
try:
    acct = open("/proc/sys/kernel/task_delayacct").read().strip()
    assert j["delay_accounting"] == {"available": True, "enabled": acct == "1"}, j["delay_accounting"]
except FileNotFoundError:
    assert j["delay_accounting"]["available"] is False
assert j["topology"]["cpus"] == len(os.sched_getaffinity(0)) or j["topology"]["cpus"] >= 1
mounts = open("/proc/self/mounts").read().split("\n")
has_v2 = any(len(m.split()) > 2 and m.split()[2] == "cgroup2" for m in mounts)
has_v1 = any(len(m.split()) > 2 and m.split()[2] == "cgroup" for m in mounts)
want = "hybrid" if has_v2 and has_v1 else "v1" if has_v1 else "v2" if has_v2 else "none"
if has_v2 and not has_v1: want = "v2"
assert j["cgroup"]["version"] == want, (j["cgroup"], want)
assert j["nvml"]["available"] in (True, False)
if not j["nvml"]["available"]:
    assert j["nvml"]["reason"], j["nvml"]
PY

if [[ -f $BIN/../lib/fake/libnvidia-ml.so.1 ]]; then
  ZERNEL_FAKE_GPU_COUNT=3 "$BIN/zernel-scheduler" --emulated-gpu info --json > "$tmp/emu.json" 2>&1
  python3 - "$tmp/emu.json" <<'PY' && pass || fail "info --emulated-gpu lists the emulated GPUs with bus ids"
import json, sys
n = json.load(open(sys.argv[1]))["nvml"]
assert n["available"] is True, n
assert "zernel emulated" in n["driver_version"], n
assert [g["bus_id"] for g in n["gpus"]] == ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0"], n["gpus"]
assert all(g["name"].startswith("NVIDIA H200") for g in n["gpus"]), n["gpus"]
PY
  "$BIN/zernel-scheduler" info --emulated-gpu > "$tmp/emu.txt" 2>&1
  check "text report lists GPU 0 with its bus id" "grep -qE 'GPU 0: +NVIDIA H200 .* at 0000:1b:00.0' $tmp/emu.txt"
else
  echo "SKIP: the emulated GPU is not built"
fi

# Without a driver (no libnvidia-ml.so.1 on this machine), NVML says why.
if ! ldconfig -p 2>/dev/null | grep 'libnvidia-ml.so.1 ' >/dev/null; then
  check "no driver: NVML says why" "grep -q '^NVML: *not available: libnvidia-ml.so.1 not found' $tmp/info.txt"
fi

"$BIN/zernel-scheduler" info --bogus > /dev/null 2>&1
rc=$?
check "info with an unknown flag is a usage error (got $rc)" "[[ $rc -ne 0 ]]"

summary
