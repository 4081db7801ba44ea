#!/usr/bin/env bash
# A daemon started beside a job that already runs (a restart, an upgrade): the rank's main
# thread is asleep waiting for its batch when discovery names it, so its switch-out came before
# its process had a role and the BPF rules hold no state for it. FIRST SIGHT (bpf/probes/
# rules.bpf.h) reads the call it still sleeps in at its first switch-in and dates the wait from
# the naming: the thread's first per-thread line (--phase-log-threads) is DataLoading, inside
# the wait the job's own truth log shows, before the step's GpuCompute. Without it the first line
# is the step's GpuCompute (its sync's entry), a batch's wait later. The job: one rank, one
# worker decoding each batch for 1 s, 2 ms of GPU work a step, so the rank sleeps in its data
# wait 99 % of the time; when the naming still lands outside a wait the daemon is started once
# more. About 15 s.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-phase-restart-test-$$"
daemon_pid=""
wl=""
cleanup() {
  [[ -n $wl ]] && kill -TERM "$wl" 2>/dev/null && wait "$wl" 2>/dev/null
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

need_emulated_gpu
[[ $(id -u) -eq 0 ]] || skip "the phase probes need root"

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[telemetry]
metrics_port = $port
TOML

"$BIN/zernel-workload" --emulated-gpu --ranks 1 --workers 1 --steps 100000 --data-ms 1000 \
  --gpu-ms 2 --optimizer-ms 1 --batch-kib 16 --truth-log "$tmp/truth.jsonl" \
  > "$tmp/workload.json" 2> "$tmp/workload.err" &
wl=$!
# The job runs before any daemon: its rank has made steps.
check "the job runs before the daemon starts" \
  "wait_for 15 '[[ \$(grep -c GpuCompute $tmp/truth.jsonl 2>/dev/null) -ge 2 ]]'"

# first_line: the rank's main thread's first per-thread line of $tmp/phases.jsonl judged against
# the truth at the naming; prints "ok ...", "no ..." (the naming fell outside a wait: try again)
# or "bad ...".
first_line() {
  python3 - "$tmp/truth.jsonl" "$tmp/phases.jsonl" <<'PY'
import json, sys
truth = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
log = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ranks = {e["pid"] for e in truth if e.get("tid") == e["pid"] and e["phase"] == "GpuCompute"}
if len(ranks) != 1:
    print("bad: ranks in the truth", ranks); sys.exit()
rank = ranks.pop()
mine = [e for e in log if e.get("tid") == rank]
if len(mine) < 2:
    print("bad: the rank's main thread has", len(mine), "per-thread lines"); sys.exit()
first = mine[0]
# When it was named: the rank's first process line (no "tid"), which user space writes at the
# naming (its phase read from /proc/PID/syscall).
named = [e for e in log if e["pid"] == rank and "tid" not in e]
if not named:
    print("bad: no process line for the rank"); sys.exit()
named_ns = named[0]["t_ns"]
# The truth of the main thread: its phase at a time, and when that stretch began.
main = sorted((e for e in truth if e["pid"] == rank and e.get("tid", rank) == rank),
              key=lambda e: e["t_ns"])
def truth_at(t):
    before = [e for e in main if e["t_ns"] <= t]
    return (before[-1]["phase"], before[-1]["t_ns"]) if before else (None, 0)
at_naming, since = truth_at(named_ns)
if at_naming != "DataLoading":
    print(f"no: named outside a wait (truth {at_naming})"); sys.exit()
# The wait that was on at the naming ends at the truth's next change.
after = [e for e in main if e["t_ns"] > named_ns]
wait_end = after[0]["t_ns"] if after else float("inf")
ms = (first["t_ns"] - since) / 1e6
if (first["phase"] == "DataLoading" and since <= first["t_ns"] < wait_end
        and mine[1]["phase"] == "GpuCompute"):
    print(f"ok: first line DataLoading {ms:.0f} ms into the true wait it was named in, then GpuCompute")
else:
    print(f"bad: named {(named_ns - since) / 1e6:.0f} ms into a wait, first line {first['phase']} "
          f"{ms:.0f} ms after that wait began (it ended after {(wait_end - since) / 1e6:.0f} ms), "
          f"then {mine[1]['phase']}")
PY
}

verdict=""
for try in 1 2; do
  rm -f "$tmp/phases.jsonl"
  daemon_wait=20 start_daemon --backend observe --emulated-gpu --control-socket '' \
    --phase-log "$tmp/phases.jsonl" --phase-log-threads || { summary; exit; }
  [[ $try -eq 1 ]] && need_probes
  # Named, then two of its steps logged (a step takes about 1 s).
  wait_for 20 "[[ \$(grep -c '\"tid\".*GpuCompute' $tmp/phases.jsonl 2>/dev/null) -ge 2 ]]"
  stop_daemon
  verdict=$(first_line)
  echo "try $try: $verdict"
  [[ $verdict == no:* ]] || break
done
check "a rank asleep in its data wait when the daemon names it is DataLoading from the naming ($verdict)" \
  "[[ \$verdict == ok:* ]]"
check "the daemon exits 0 on SIGTERM (got $daemon_rc)" "[[ $daemon_rc -eq 0 ]]"
summary
