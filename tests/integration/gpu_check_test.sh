#!/usr/bin/env bash
# scripts/gpu-check.sh --emulated: the real-GPU check's path on the emulated GPU (the daemon with
# --phase-log-threads, tools/torch_job.py with helpers, pin_memory off and on, the uprobe and
# NVML watcher, the per-thread score). Checks that it exits 0 and that each part printed figures:
# uprobe hits on the emulated libcuda's cuStreamSynchronize and zfgEnqueueWork (its launch), the
# daemon's sync_enter counter, NVML samples of the job, and a per-thread score with a main thread,
# the workers and the helpers (and the pin-memory thread in the second job).
# Needs root (BPF probes, tracefs), the emulated GPU and python3-torch; SKIP without.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$tmp"' EXIT

py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" > /dev/null && "$p" -c 'import torch' 2> /dev/null; then py=$p; break; fi
done
[[ -n $py ]] || skip "python3-torch is not installed"
need_emulated_gpu
[[ $(id -u) -eq 0 ]] || skip "needs root (BPF probes, tracefs uprobes)"
[[ -e /sys/kernel/btf/vmlinux ]] || skip "the kernel has no BTF (the probes cannot load)"

# The build under test, not a bundle lying in the source tree.
ZERNEL_GPU_CHECK_BUNDLE=$tmp/no-bundle "$SRC/scripts/gpu-check.sh" --emulated --steps 8 \
  --build-dir "$BIN/.." > "$tmp/out.txt" 2>&1
rc=$?
cat "$tmp/out.txt"
check "gpu-check.sh --emulated exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "it ran both jobs" "[[ \$(grep -c '^=== pin_memory' $tmp/out.txt) -eq 2 ]]"
"$py" - "$tmp/out.txt" <<'PY' && pass || fail "each part printed its figures (above)"
import json, re, sys
text = open(sys.argv[1]).read()
for m in re.finditer(r"libcuda \([^)]*\): (.*)", text):
    hits = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+)", m.group(1)))
    assert hits.get("cuStreamSynchronize", 0) >= 8 and hits.get("zfgEnqueueWork", 0) >= 8, hits
assert len(re.findall(r"libcuda \(", text)) == 2, "no uprobe line per job"
syncs = [int(v) for v in re.findall(r"sync_enter (\d+)", text)]
assert len(syncs) == 2 and min(syncs) >= 8, syncs
samples = [int(v) for v in re.findall(r"samples (\d+), distinct", text)]
assert len(samples) == 2 and min(samples) >= 1, samples
scores = [json.loads(l) for l in text.splitlines() if l.startswith('{"label":"gpu-check')]
per_thread = [s for s in scores if "threads" in s]
assert len(scores) == 4 and len(per_thread) == 2, len(scores)
for s in per_thread:
    roles = set(s["roles"])
    assert {"main", "worker", "nccl_proxy", "helper", "reader", "logger"} <= roles, roles
assert "pin_memory" in per_thread[1]["roles"], per_thread[1]["roles"]
PY
summary
