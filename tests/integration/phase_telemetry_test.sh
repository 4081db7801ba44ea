#!/usr/bin/env bash
# What users see is what happened (issue 22 item 7): a 2-rank zernel-workload with 60 ms GPU steps
# under the daemon (observe mode, phases from events, emulated GPU), and the per-phase seconds of
# `status --json`, `top --once`, GET /status and /metrics (zernel_scheduler_phase_seconds_total)
# against the same seconds computed from --phase-log, each up to the moment its snapshot was
# taken; the transition count against the phase log's changes. Within 5 %, plus the display's
# rounding and one change per process that the BPF rules send late: a worker's idle is dated when
# its sleep began but sent when it next runs, a sync's GpuCompute after its hysteresis, so a
# snapshot may still count that stretch in the phase before (the phase log, written as they are
# sent, has it right; the next snapshot too). Before the engine took the events' times, the 100 ms tick sampled one phase per
# process: GpuCompute read 0.0 s and the transitions a few dozen where the log had hundreds.
# About 15 s.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-phase-telemetry-test-$$"
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
sock="$tmp/ctl.sock"
daemon_wait=20 start_daemon --backend observe --emulated-gpu --control-socket "$sock" \
  --phase-log "$tmp/phases.jsonl" || { summary; exit; }
need_probes

"$BIN/zernel-workload" --emulated-gpu --ranks 2 --workers 1 --steps 400 --data-ms 10 \
  --gpu-ms 60 --nccl-ms 5 --optimizer-ms 10 --batch-kib 64 --truth-log "$tmp/truth.jsonl" \
  > "$tmp/workload.json" 2> "$tmp/workload.err" &
wl=$!
# Both ranks followed (they log GpuCompute), then 6 s of steps.
check "both ranks' phases are logged" \
  "wait_for 20 '[[ \$(grep -c GpuCompute $tmp/phases.jsonl 2>/dev/null) -ge 4 ]]'"
sleep 6

# Each reading with the CLOCK_MONOTONIC interval around it (python's time.monotonic_ns).
python3 - "$BIN/zernel-scheduler" "$sock" "$port" "$tmp" <<'PY'
import json, subprocess, sys, time, urllib.request
bin_, sock, port, tmp = sys.argv[1:5]
def timed(fn):
    t0 = time.monotonic_ns(); v = fn(); return v, t0, time.monotonic_ns()
def run(*args):
    return subprocess.run([bin_, *args, "--socket", sock], check=True, capture_output=True,
                          text=True).stdout
def http(path):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read().decode()
out = {}
out["status"] = timed(lambda: json.loads(run("status", "--json")))
out["top"] = timed(lambda: run("top", "--once"))
out["top_threads"] = timed(lambda: run("top", "--once", "--threads"))
# /status and /metrics of one published snapshot: read again when a publish came in between.
for _ in range(5):
    (s1, m, s2), t0, t1 = timed(lambda: (json.loads(http("/status")), http("/metrics"),
                                         json.loads(http("/status"))))
    if s1.get("taken_at_ns") == s2.get("taken_at_ns"):
        break
out["http_status"] = (s1, t0, t1)
out["metrics"] = (m, t0, t1)
json.dump(out, open(f"{tmp}/readings.json", "w"))
PY
check "the readings were taken" "[[ -s $tmp/readings.json ]]"

python3 - "$tmp" <<'PY' && pass || fail "per-phase seconds and transitions agree with the phase log"
import bisect, json, re, sys
from collections import defaultdict
tmp = sys.argv[1]
PHASES = ["DataLoading", "GpuCompute", "NcclCollective", "OptimizerStep"]
LABELS = dict(zip(PHASES, ["data_loading", "gpu_compute", "nccl_collective", "optimizer_step"]))
rows = [json.loads(l) for l in open(f"{tmp}/phases.jsonl")]
rows = [r for r in rows if "tid" not in r]
by_pid = defaultdict(list)
for r in rows:
    by_pid[r["pid"]].append((r["t_ns"], r["phase"]))
truth_pids = sorted({json.loads(l)["pid"] for l in open(f"{tmp}/truth.jsonl")})
ranks = sorted({json.loads(l)["pid"] for l in open(f"{tmp}/truth.jsonl")
                if json.loads(l)["phase"] == "GpuCompute"})
assert len(ranks) == 2, ranks

def log_seconds(pid, t):
    """Seconds in each phase by the phase log up to t (Unknown before the first line)."""
    sec = defaultdict(float)
    spans = by_pid.get(pid, [])
    for i, (t0, ph) in enumerate(spans):
        if t0 >= t:
            break
        t1 = min(spans[i + 1][0], t) if i + 1 < len(spans) else t
        sec[ph] += (t1 - t0) / 1e9
    return sec

def changes_until(t):
    return sum(1 for r in rows if r["t_ns"] <= t)

LATE_S = 0.1  # one change sent late, per process (a worker's sleep between two batches here)

def close(seen, lo, hi, slack):
    """seen within 5 % of the log's value, which lies in [lo, hi] (the reading's interval)."""
    return lo * 0.95 - slack <= seen <= hi * 1.05 + slack

r = json.load(open(f"{tmp}/readings.json"))
bad = []
print(f"{'reading':<12} {'pid':>7} {'phase':<15} {'shown s':>8} {'log s':>14}")
# status --json and GET /status: at their snapshot's time.
for name in ("status", "http_status"):
    doc, t0, t1 = r[name]
    taken = doc.get("taken_at_ns")
    lo_t, hi_t = (taken, taken) if taken else (t0 - 1_000_000_000, t1)
    tasks = {t["pid"]: t for t in doc["tasks"]}
    for pid in ranks:
        assert pid in tasks, (name, pid, sorted(tasks))
        for ph in PHASES:
            shown = tasks[pid]["phase_time_ms"][ph] / 1e3
            lo, hi = log_seconds(pid, lo_t)[ph], log_seconds(pid, hi_t)[ph]
            print(f"{name:<12} {pid:>7} {ph:<15} {shown:>8.3f} {lo:>6.3f}..{hi:<6.3f}")
            if not close(shown, lo, hi, LATE_S):
                bad.append(f"{name} pid {pid} {ph}: {shown:.3f} s, log {lo:.3f}..{hi:.3f} s")
    lo_n, hi_n = changes_until(lo_t), changes_until(hi_t)
    print(f"{name:<12} transitions {doc['transitions']}, log changes {lo_n}..{hi_n}")
    if not close(doc["transitions"], lo_n, hi_n, 2 * len(doc["tasks"])):
        bad.append(f"{name} transitions {doc['transitions']}, log {lo_n}..{hi_n}")
    gpu = sum(tasks[p]["phase_time_ms"]["GpuCompute"] for p in ranks)
    if gpu <= 0:
        bad.append(f"{name}: the ranks show no GpuCompute time")
# top --once: the columns DATA_S GPU_S NCCL_S OPT_S (0.1 s) of each rank's row.
text, t0, t1 = r["top"]
for pid in ranks:
    line = next((l for l in text.splitlines() if l.split()[:1] == [str(pid)]), None)
    assert line is not None, (pid, text)
    nums = re.findall(r"\s(\d+\.\d)\s", line + " ")
    shown = dict(zip(PHASES, map(float, nums[:4])))
    for ph in PHASES:
        lo, hi = log_seconds(pid, t0 - 200_000_000)[ph], log_seconds(pid, t1)[ph]
        print(f"{'top':<12} {pid:>7} {ph:<15} {shown[ph]:>8.1f} {lo:>6.3f}..{hi:<6.3f}")
        if not close(shown[ph], lo, hi, LATE_S + 0.05):
            bad.append(f"top pid {pid} {ph}: {shown[ph]} s, log {lo:.3f}..{hi:.3f} s")
# top --threads: a row for each rank's main thread, under the rank's own.
lines = r["top_threads"][0].splitlines()
for pid in ranks:
    i = next((k for k, l in enumerate(lines) if l.split()[:2] == [str(pid), "zernel-workload"]), None)
    if i is None or i + 1 >= len(lines) or lines[i + 1].split()[:2] != [str(pid), "thread"]:
        bad.append(f"top --threads: no thread row {pid} under its process")
# /metrics: zernel_scheduler_phase_seconds_total (every tracked process) and the transitions.
metrics, _, _ = r["metrics"]
taken = r["http_status"][0].get("taken_at_ns") or r["http_status"][2]
series = dict(re.findall(r'^zernel_scheduler_phase_seconds_total\{phase="(\w+)"\} (\S+)$',
                         metrics, re.M))
pids = [p for p in by_pid if p in {t["pid"] for t in r["http_status"][0]["tasks"]}]
for ph in PHASES:
    shown = float(series.get(LABELS[ph], "nan"))
    log = sum(log_seconds(p, taken)[ph] for p in pids)
    print(f"{'metrics':<12} {'all':>7} {ph:<15} {shown:>8.3f} {log:>14.3f}")
    if not close(shown, log, log, LATE_S * len(pids)):
        bad.append(f"metrics {ph}: {shown:.3f} s, log {log:.3f} s")
m = re.search(r"^zernel_scheduler_phase_transitions_total (\d+)$", metrics, re.M)
n = changes_until(taken)
print(f"metrics transitions {m.group(1) if m else None}, log changes {n}")
if not m or not close(int(m.group(1)), n, n, 2 * len(pids)):
    bad.append(f"metrics transitions {m.group(1) if m else None}, log {n}")
for b in bad:
    print("MISMATCH:", b)
sys.exit(1 if bad else 0)
PY

kill -TERM "$wl" 2>/dev/null; wait "$wl" 2>/dev/null; wl=""
stop_daemon
check "daemon exits 0 (got $daemon_rc)" "[[ $daemon_rc -eq 0 ]]"
if [[ $failures -ne 0 ]]; then
  echo "--- daemon log"; tail -n 30 "$tmp/daemon.log"
  echo "--- workload"; tail -n 5 "$tmp/workload.err"
fi
summary
