#!/usr/bin/env bash
# A short run of the protection benchmark (bench/protection.sh --smoke --check): every arm runs
# (solo, stock, nice19, zernel), produces sane figures, the table and the closing JSON line. No
# performance thresholds (CI machines are noisy; the targets are checked by the full benchmark,
# docs/benchmarks.md), but the mechanisms are checked: the hogs stay at nice 0 next to the daemon
# and at 19 under nice, and the daemon gives the DataLoader workers a negative nice.
# Also the script's usage errors and its clean-up (no process, segment or temporary file left).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
SCRIPT=$SRC/bench/protection.sh
probe_pid=""
cleanup() {
  [[ -n $probe_pid ]] && kill -KILL "$probe_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
finish() {
  summary
  exit
}

need_emulated_gpu

# Usage errors and missing binaries: clear messages, no run.
out=$(bash "$SCRIPT" --reps 0 2>&1); rc=$?
check "--reps 0 exits 2 (got $rc)" "[[ $rc -eq 2 ]] && grep -q -- '--reps' <<<\"\$out\""
out=$(bash "$SCRIPT" --arms solo,turbo 2>&1); rc=$?
check "an unknown arm exits 2 (got $rc)" "[[ $rc -eq 2 ]] && grep -q turbo <<<\"\$out\""
out=$(bash "$SCRIPT" --bin "$tmp/nowhere" 2>&1); rc=$?
check "a missing binary exits 1 and is named (got $rc)" \
  "[[ $rc -eq 1 ]] && grep -q '$tmp/nowhere/zernel-workload' <<<\"\$out\""

# The zernel arm needs the userspace backend: probe for it, and say so when it is not built.
arms=solo,stock,nice19,zernel
port=$(free_port)
printf '[telemetry]\nmetrics_port = %s\n' "$port" > "$tmp/probe.toml"
daemon_config=$tmp/probe.toml daemon_log=$tmp/probe.log daemon_wait=3 \
  daemon_prefix="env ZERNEL_FAKE_GPU_SHM=/zernel-protection-probe-$$" launch_daemon \
  --backend userspace --emulated-gpu --control-socket "$tmp/probe.sock"
probe_pid=$daemon_pid daemon_pid=""
kill -TERM "$probe_pid" 2>/dev/null
wait "$probe_pid" 2>/dev/null
probe_pid=""
rm -f /dev/shm/zernel-protection-probe-$$
if grep -q 'not available in this build' "$tmp/probe.log"; then
  echo "SKIP: the zernel arm (zernel-scheduler --backend userspace is not available in this build)"
  arms=solo,stock,nice19
fi

# What the script starts carries this tag in its environment, so that what it leaves behind can
# be found without mistaking other people's processes for it; its temporary files go to $TMPDIR.
# (Only the script gets the tag, so this shell and the scan itself do not carry it.)
tag="ZERNEL_PROTECTION_SMOKE_TAG=$$"
mkdir -p "$tmp/t"
tagged() {
  python3 - "$tag" <<'PY'
import glob, sys
tag = sys.argv[1].encode()
found = []
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        if tag in open(path, "rb").read().split(b"\0"):
            found.append(path.split("/")[2])
    except OSError:
        pass
print(len(found), " ".join(found))
PY
}
start=$(date +%s)
env "$tag" TMPDIR="$tmp/t" bash "$SCRIPT" --smoke --check --bin "$BIN" --arms "$arms" --keep "$tmp/logs" \
  > "$tmp/out.txt" 2> "$tmp/err.txt" &
spid=$!
wait "$spid"
rc=$?
secs=$(($(date +%s) - start))
check "the smoke run exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
# Its time is reported, not checked (about 15 s on an idle 2-core machine; a loaded one is slower).
echo "smoke run: ${secs} s"
check "the table has its header" "grep -qE '^arm +steps/s +vs solo +p50 ms +p99 ms +p99/solo' $tmp/out.txt"
python3 - "$tmp/out.txt" "$arms" "$tmp/logs" <<'PY' && pass || fail "the JSON line and its figures"
import glob, json, math, sys
lines = open(sys.argv[1]).read().strip().splitlines()
j = json.loads(lines[-1])
arms = sys.argv[2].split(",")
assert j["benchmark"] == "protection" and j["reps"] == 1, j
assert sorted(j["arms"]) == sorted(arms), j["arms"].keys()
for arm in arms:
    a = j["arms"][arm]
    assert a["runs"] == 1 and not a["errors"], (arm, a)
    for k in ("steps_per_s", "step_p50_ms", "step_p99_ms", "relative", "p99_vs_solo"):
        assert isinstance(a[k], (int, float)) and math.isfinite(a[k]) and a[k] > 0, (arm, k, a)
    assert a["step_p50_ms"] <= a["step_p99_ms"], (arm, a)
    assert a["data_wait_mean_ms"] >= 0, (arm, a)
assert j["arms"]["solo"]["relative"] == 1.0
# Every hog thread: nice 0 next to the stock scheduler, 19 under nice.
assert j["arms"]["stock"]["nice_share"]["hog"] == {"0": 1.0}, j["arms"]["stock"]["nice_share"]
assert j["arms"]["nice19"]["nice_share"]["hog"] == {"19": 1.0}, j["arms"]["nice19"]["nice_share"]
if "zernel" in arms:
    ns = j["arms"]["zernel"]["nice_share"]
    # The daemon leaves the hogs alone (not ML processes) and raises the DataLoader workers.
    assert ns["hog"] == {"0": 1.0}, ns
    assert any(int(v) < 0 for v in ns["worker"]), ns
    assert j["targets"] is not None
# The step log: one line per step of the one rank, warm-up marked.
steps = [json.loads(l) for l in open(glob.glob(sys.argv[3] + "/solo.0/steps.jsonl")[0])]
assert len(steps) == j["steps"], len(steps)
assert sum(s["warmup"] for s in steps) == j["warmup_steps"], steps[:3]
assert all(0 <= s["data_wait_ms"] <= s["step_ms"] for s in steps), steps[:3]
PY
left=$(tagged)
check "no process left behind (found: $left)" "[[ ${left%% *} -eq 0 ]]"
check "no emulated-GPU segment left" "[[ ! -e /dev/shm/zernel-protection-$spid ]]"
check "no temporary file left" "[[ -z \$(ls -A $tmp/t) ]]"

# Ctrl-C in the middle: exit 130, every process it started stopped. (Job control on, so that the
# background script does not start with SIGINT ignored, as it would in a non-interactive shell.)
set -m
env "$tag" TMPDIR="$tmp/t" bash "$SCRIPT" --smoke --bin "$BIN" --arms solo,stock > "$tmp/int.txt" 2>&1 &
spid=$!
set +m
sleep 3
kill -INT "$spid"
wait "$spid"
rc=$?
check "SIGINT exits 130 (got $rc)" "[[ $rc -eq 130 ]]"
left=$(tagged)
check "SIGINT leaves no process (found: $left)" "[[ ${left%% *} -eq 0 ]]"
check "SIGINT leaves no emulated-GPU segment" "[[ ! -e /dev/shm/zernel-protection-$spid ]]"
check "SIGINT leaves no temporary file" "[[ -z \$(ls -A $tmp/t) ]]"

if [[ $failures -ne 0 ]]; then
  echo "--- output"; cat "$tmp/out.txt"; echo "--- stderr"; cat "$tmp/err.txt"
fi
finish
