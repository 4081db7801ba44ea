#!/usr/bin/env bash
# The protection benchmark: does a training job keep its speed when a noisy neighbour moves in?
#
# Five arms, each a run of zernel-workload on the emulated GPU:
#   solo    the job alone
#   stock   the job next to CPU hogs (`zernel-workload noise`, twice as many threads as CPUs),
#           stock Linux scheduler
#   nice19  the same, the hogs under `nice -n 19`, no daemon (what an operator can do by hand)
#   zernel  the same hogs at nice 0, with `zernel-scheduler --backend userspace --emulated-gpu`
#           started before the job (it finds the job through the emulated NVML, its DataLoader
#           workers as the ranks' descendants, and renices them by phase; the hogs are not ML
#           processes and are left alone), phases from events (`[phase_detection] mode =
#           "events"`, the default: the probes' per-thread phase state machine)
#   periodic the same daemon with `[phase_detection] mode = "periodic"` (phases from signals
#           sampled every phase_eval_interval_ms, committed after phase_stability_count equal
#           samples): what phases from events buy, in the same run
# Each arm runs --reps times, interleaved (rep r runs the arms in an order rotated by r, so drift
# on the machine hits every arm alike). Per arm: the median over the reps of steps/s, step p50 and
# step p99 (from the job's closing summary, warm-up steps left out), and the worst step of any
# rep; relative = steps/s / solo steps/s, p99/solo = step p99 / solo step p99; wait = the mean
# time per step the job's main process waited for its batch (the DataLoader on the critical
# path). It prints a table and, last, one JSON line.
#
#   bench/protection.sh [--reps N] [--steps N] [--warmup-steps N] [--smoke] [--check]
#                       [--check-targets] [--arms LIST] [--bin DIR] [--hog-threads N]
#                       [--backend KIND] [--job-args 'ARGS'] [--own-session] [--keep DIR]
#
# Root (the zernel arm lowers nice values). Binaries from --bin, else $ZERNEL_BIN, else build/bin.
# Exit status: 0 when every arm ran; 1 when one could not run or a run failed; 2 on a bad command
# line; with --check also 1 when a figure is not sane (the "Sanity" part of the Python below);
# with --check-targets 3 when the zernel arm misses the targets (>= 90 % of solo steps/s, step
# p99 <= 1.5x solo); 130 on Ctrl-C. Every process it starts is stopped on exit, Ctrl-C included.
# docs/benchmarks.md ("Protection benchmark") has the figures and the reasoning behind the job.
set -uo pipefail

usage() {
  sed -n '/^#   bench\/protection.sh/,/^#                       \[--backend/p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'
  --reps N           repetitions of every arm (default 3)
  --steps N          training steps per run (default 200)
  --warmup-steps N   first steps left out of the figures (default 40; covers the daemon's
                     discovery of the job, about a second)
  --smoke            a short run for CI: 1 rep, 60 steps, 20 warm-up, every phase of the job
                     halved (unless given explicitly)
  --check            exit 1 unless every arm produced sane figures (CI)
  --check-targets    exit 3 when the zernel arm misses the targets
  --arms LIST        comma-separated subset of solo,stock,nice19,periodic,zernel (default: all
                     five; periodic and zernel differ only in [phase_detection] mode)
  --bin DIR          where zernel-workload and zernel-scheduler are (default $ZERNEL_BIN or build/bin)
  --hog-threads N    CPU hog threads (default 2 x CPUs)
  --backend KIND     the daemon's backend in the periodic and zernel arms (default userspace;
                     observe shows what the daemon costs without enforcing anything)
  --job-args 'ARGS'  replace the job's shape (default: the JOB_ARGS below)
  --own-session      start the hogs in a session of their own (setsid): with autogroup on
                     (kernel.sched_autogroup_enabled, Debian's default), the kernel then shares
                     the CPU between the job's session and the hogs' session first, and nice
                     values only act inside a session
  --keep DIR         keep every run's logs (job summaries, daemon log, phase log, nice samples)
EOF
}

die_usage() {
  echo "protection.sh: $*" >&2
  echo "Run with --help for more information." >&2
  exit 2
}

here=$(cd "$(dirname "$0")" && pwd)
reps=3
steps=200
warmup=40
check=0
check_targets=0
arms_arg="solo,stock,nice19,periodic,zernel"
bin=${ZERNEL_BIN:-$here/../build/bin}
cpus=$(nproc)
hog_threads=$((2 * cpus))
backend=userspace
keep=""
own_session=0
# The job: one rank with two DataLoader workers; a batch costs 70 ms of CPU decode and the rest of
# a step 50 ms (GPU 40, all-reduce 5, optimizer 5), so each worker makes one batch every other
# step and is busy ~70 % of the time: alone, the batch is ready when the rank asks for it; a
# worker that gets less than ~70 % of a CPU puts the batch on the critical path, and every ms of
# CPU the workers lose to a neighbour shows in the step time. --smoke halves every duration.
JOB_ARGS="--ranks 1 --workers 2 --data-ms 70 --gpu-ms 40 --nccl-ms 5 --optimizer-ms 5 --batch-kib 256"
SMOKE_JOB_ARGS="--ranks 1 --workers 2 --data-ms 35 --gpu-ms 20 --nccl-ms 2.5 --optimizer-ms 2.5 --batch-kib 128"
job_args=""
smoke=0
steps_set=0
warmup_set=0
reps_set=0

need_value() { [[ $# -ge 2 && -n $2 ]] || die_usage "$1 needs a value"; }
is_uint() { [[ $1 =~ ^(0|[1-9][0-9]{0,8})$ ]]; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) need_value "$@"; reps=$2; reps_set=1; shift 2 ;;
    --steps) need_value "$@"; steps=$2; steps_set=1; shift 2 ;;
    --warmup-steps) need_value "$@"; warmup=$2; warmup_set=1; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --check) check=1; shift ;;
    --check-targets) check_targets=1; shift ;;
    --arms) need_value "$@"; arms_arg=$2; shift 2 ;;
    --bin) need_value "$@"; bin=$2; shift 2 ;;
    --hog-threads) need_value "$@"; hog_threads=$2; shift 2 ;;
    --backend) need_value "$@"; backend=$2; shift 2 ;;
    --job-args) need_value "$@"; job_args=$2; shift 2 ;;
    --keep) need_value "$@"; keep=$2; shift 2 ;;
    --own-session) own_session=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
done
if [[ $smoke -eq 1 ]]; then
  [[ $reps_set -eq 1 ]] || reps=1
  [[ $steps_set -eq 1 ]] || steps=60
  [[ $warmup_set -eq 1 ]] || warmup=20
  [[ -n $job_args ]] || job_args=$SMOKE_JOB_ARGS
fi
[[ -n $job_args ]] || job_args=$JOB_ARGS
is_uint "$reps" && [[ $reps -ge 1 && $reps -le 100 ]] || die_usage "--reps must be 1..100 (got '$reps')"
is_uint "$steps" && [[ $steps -ge 2 ]] || die_usage "--steps must be an integer >= 2 (got '$steps')"
is_uint "$warmup" && [[ $warmup -lt $steps ]] ||
  die_usage "--warmup-steps must be an integer less than --steps (got '$warmup')"
is_uint "$hog_threads" && [[ $hog_threads -ge 1 && $hog_threads -le 4096 ]] ||
  die_usage "--hog-threads must be 1..4096 (got '$hog_threads')"
case $backend in userspace|observe|sched_ext|auto) ;; *) die_usage "--backend must be userspace, observe, sched_ext or auto (got '$backend')" ;; esac
arms=()
IFS=',' read -r -a requested <<< "$arms_arg"
for a in "${requested[@]}"; do
  case $a in
    solo|stock|nice19|periodic|zernel) [[ " ${arms[*]-} " == *" $a "* ]] || arms+=("$a") ;;
    *) die_usage "unknown arm '$a' in --arms (arms: solo, stock, nice19, periodic, zernel)" ;;
  esac
done
[[ ${#arms[@]} -gt 0 ]] || die_usage "--arms is empty"
[[ " ${arms[*]} " == *" solo "* ]] || die_usage "--arms must include solo (the other arms are relative to it)"
read -r -a job_argv <<< "$job_args"

# --- what it needs, up front
workload=$bin/zernel-workload
scheduler=$bin/zernel-scheduler
missing=()
[[ -x $workload ]] || missing+=("$workload")
[[ -f $bin/../lib/fake/libcuda.so.1 ]] || missing+=("$bin/../lib/fake/libcuda.so.1 (the emulated GPU)")
if [[ " ${arms[*]} " == *" zernel "* || " ${arms[*]} " == *" periodic "* ]]; then
  [[ -x $scheduler ]] || missing+=("$scheduler")
  [[ -f $bin/../lib/fake/libnvidia-ml.so.1 ]] || missing+=("$bin/../lib/fake/libnvidia-ml.so.1 (the emulated NVML)")
  [[ $(id -u) -eq 0 ]] || { echo "protection.sh: the periodic and zernel arms need root (it lowers nice values)" >&2; exit 1; }
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "protection.sh: missing (build them, or point --bin / ZERNEL_BIN at a bin directory):" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi
for tool in python3 curl; do
  command -v "$tool" > /dev/null || { echo "protection.sh: $tool is needed" >&2; exit 1; }
done

# --- processes and cleanup
# tmp, the daemon's paths under it, launch_daemon.
export ZERNEL_BIN=$bin
. "$here/../tests/integration/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-protection-$$"
live=()  # pids of what is running now: job, hogs, daemon, sampler
stop_pid() {
  # SIGTERM, then SIGKILL after 5 s; reaps it.
  local pid=$1
  kill -TERM "$pid" 2> /dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$pid" 2> /dev/null || break
    # A child of this shell stays a zombie until waited for: test for that too.
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) == Z ]] && break
    sleep 0.1
  done
  kill -KILL "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  return 0
}
stop_all() {
  local pid
  for pid in "${live[@]}"; do stop_pid "$pid"; done
  live=()
}
cleanup() {
  trap - EXIT INT TERM
  stop_all
  if [[ -n $keep ]]; then
    mkdir -p "$keep" && cp -r "$tmp"/. "$keep"/ && echo "protection.sh: logs kept in $keep" >&2
  fi
  rm -rf "$tmp"
  rm -f "/dev/shm$ZERNEL_FAKE_GPU_SHM"
}
trap cleanup EXIT
trap 'echo "protection.sh: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Samples the nice value of every thread of the job's processes and of the hogs every 250 ms:
# "role pid tid nice" lines (role: rank, worker, hog). The job's launcher is $1, the hogs $2.
# Builtins only, no fork per sample: a sampler that forks (or a Python that has to start up)
# next to hogs and a job at nice -10 falls seconds behind, and takes CPU from what it measures.
emit_nice() {
  local role=$1 pid=$2 t stat f
  for t in /proc/"$pid"/task/*; do
    read -r stat < "$t/stat" 2> /dev/null || continue
    read -r -a f <<< "${stat##*) }"  # fields from 3 on: nice (field 19) is f[16]
    echo "$role $pid ${t##*/} ${f[16]}"
  done
}
sample_nice() {
  local launcher=$1 hogs=$2 out=$3 r w kids wkids tick
  # A pipe this shell holds both ends of: read -t on it sleeps without a fork.
  exec {tick}<> <(:)
  while [[ -d /proc/$launcher ]]; do
    {
      emit_nice hog "$hogs"
      kids=""
      read -r kids < "/proc/$launcher/task/$launcher/children" 2> /dev/null
      for r in $kids; do
        emit_nice rank "$r"
        wkids=""
        read -r wkids < "/proc/$r/task/$r/children" 2> /dev/null
        for w in $wkids; do emit_nice worker "$w"; done
      done
    } >> "$out"
    read -r -t 0.25 -u "$tick" _
  done
}

# run_arm ARM REP: one run; writes $tmp/ARM.REP.json (the job's summary) or fails with a reason
# in $tmp/ARM.REP.error.
run_arm() {
  local arm=$1 rep=$2 dir=$tmp/$1.$2 port hogs="" daemon="" job sampler="" rc
  mkdir -p "$dir"
  if [[ $arm == zernel || $arm == periodic ]]; then
    local mode=events
    [[ $arm == periodic ]] && mode=periodic
    port=$(free_port)
    cat > "$dir/daemon.toml" <<TOML
[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200
[phase_detection]
mode = "$mode"
[telemetry]
metrics_port = $port
TOML
    local up=0
    daemon_config=$dir/daemon.toml daemon_log=$dir/daemon.log launch_daemon --backend "$backend" \
      --emulated-gpu --control-socket "$dir/ctl.sock" --phase-log "$dir/phases.jsonl" && up=1
    daemon=$daemon_pid
    live+=("$daemon")
    if [[ $up -ne 1 ]]; then
      wait "$daemon" 2> /dev/null
      rc=$?
      live=()
      {
        echo "zernel-scheduler --backend $backend did not start (exit $rc):"
        tail -n 3 "$dir/daemon.log"
      } > "$tmp/$arm.$rep.error"
      return 1
    fi
  fi
  if [[ $arm != solo ]]; then
    local launch=()
    # setsid without --fork execs in place (this shell's child is not a group leader), so $! is
    # the hogs' pid either way.
    [[ $own_session -eq 1 ]] && launch+=(setsid)
    [[ $arm == nice19 ]] && launch+=(nice -n 19)
    "${launch[@]}" "$workload" noise --threads "$hog_threads" > "$dir/noise.json" 2>&1 &
    hogs=$!
    live+=("$hogs")
    sleep 0.5  # the hogs are running when the job starts
  fi
  "$workload" --emulated-gpu --steps "$steps" --warmup-steps "$warmup" "${job_argv[@]}" \
    --step-log "$dir/steps.jsonl" > "$dir/job.json" 2> "$dir/job.err" &
  job=$!
  live+=("$job")
  if [[ -n $hogs ]]; then
    sample_nice "$job" "$hogs" "$dir/nice.txt" 2> "$dir/sampler.err" &
    sampler=$!
    live+=("$sampler")
  fi
  wait "$job"
  rc=$?
  stop_all  # sampler, hogs and daemon; the daemon restores what it changed on SIGTERM
  if [[ -n $daemon ]]; then
    wait "$daemon" 2> /dev/null
  fi
  local summary
  summary=$(tail -n 1 "$dir/job.json" 2> /dev/null)
  if [[ $rc -ne 0 || -z $summary ]]; then
    {
      echo "the job exited $rc:"
      tail -n 3 "$dir/job.err"
    } > "$tmp/$arm.$rep.error"
    return 1
  fi
  echo "$summary" > "$tmp/$arm.$rep.json"
  return 0
}

echo "protection benchmark: ${#arms[@]} arms x $reps reps, $steps steps ($warmup warm-up), $cpus CPUs, $hog_threads hog threads" >&2
echo "job: zernel-workload --emulated-gpu $job_args" >&2
[[ $own_session -eq 1 ]] && echo "hogs in a session of their own (autogroup: $(cat /proc/sys/kernel/sched_autogroup_enabled 2> /dev/null || echo absent))" >&2
failed=0
for ((rep = 0; rep < reps; rep++)); do
  n=${#arms[@]}
  for ((i = 0; i < n; i++)); do
    arm=${arms[$(((i + rep) % n))]}
    start=$(date +%s.%N)
    if run_arm "$arm" "$rep"; then
      python3 - "$tmp/$arm.$rep.json" "$arm" "$rep" "$start" <<'PY' >&2
import json, sys, time
s = json.loads(open(sys.argv[1]).read())
print(f"  rep {int(sys.argv[3]) + 1} {sys.argv[2]:7s} {s['steps_per_s']:8.3f} steps/s  "
      f"p50 {s['step_p50_ms']:8.1f} ms  p99 {s['step_p99_ms']:8.1f} ms  "
      f"worst {s['step_max_ms']:8.1f} ms  ({time.time() - float(sys.argv[4]):.1f} s)")
PY
    else
      failed=1
      echo "  rep $((rep + 1)) $arm FAILED: $(head -c 600 "$tmp/$arm.$rep.error")" >&2
    fi
  done
done

# --- figures, table, JSON
autogroup=$(cat /proc/sys/kernel/sched_autogroup_enabled 2> /dev/null || echo absent)
python3 - "$tmp" "$reps" "$steps" "$warmup" "$cpus" "$hog_threads" "$backend" "$job_args" \
  "$check" "$check_targets" "$own_session" "$autogroup" "${arms[@]}" <<'PY'
import json, math, os, statistics, sys
from collections import Counter, defaultdict

tmp, reps, steps, warmup, cpus, hogs, backend, job_args, check, check_targets = sys.argv[1:11]
reps, steps, warmup, cpus, hogs = int(reps), int(steps), int(warmup), int(cpus), int(hogs)
check, check_targets = check == "1", check_targets == "1"
own_session, autogroup = sys.argv[11] == "1", sys.argv[12]
arms = sys.argv[13:]
MIN_RELATIVE, MAX_P99_RATIO = 0.90, 1.5

problems = []
result = {}
for arm in arms:
    runs, errors = [], []
    for rep in range(reps):
        path = os.path.join(tmp, f"{arm}.{rep}.json")
        err = os.path.join(tmp, f"{arm}.{rep}.error")
        if os.path.exists(err):
            errors.append(open(err).read().strip().splitlines()[0])
            continue
        s = json.loads(open(path).read())
        runs.append({k: s[k] for k in ("steps_per_s", "step_p50_ms", "step_p99_ms", "step_max_ms",
                                        "data_wait_mean_ms", "measured_steps", "interrupted")})
    nice = Counter()
    for rep in range(reps):
        path = os.path.join(tmp, f"{arm}.{rep}", "nice.txt")
        if os.path.exists(path):
            for line in open(path):
                f = line.split()
                if len(f) == 4 and f[3].lstrip("-").isdigit():
                    nice[(f[0], int(f[3]))] += 1
    entry = {"runs": len(runs), "errors": errors}
    if runs:
        entry["steps_per_s"] = round(statistics.median(r["steps_per_s"] for r in runs), 4)
        entry["step_p50_ms"] = round(statistics.median(r["step_p50_ms"] for r in runs), 3)
        entry["step_p99_ms"] = round(statistics.median(r["step_p99_ms"] for r in runs), 3)
        entry["worst_step_ms"] = round(max(r["step_max_ms"] for r in runs), 3)
        entry["data_wait_mean_ms"] = round(statistics.median(r["data_wait_mean_ms"] for r in runs), 3)
        entry["per_run"] = [{k: r[k] for k in ("steps_per_s", "step_p50_ms", "step_p99_ms",
                                               "step_max_ms", "data_wait_mean_ms")} for r in runs]
    if nice:
        # Share of samples per nice value, per role: what the daemon (or nice -n 19) did.
        by_role = defaultdict(dict)
        totals = Counter()
        for (role, value), n in nice.items():
            totals[role] += n
        for (role, value), n in sorted(nice.items()):
            by_role[role][str(value)] = round(n / totals[role], 3)
        entry["nice_share"] = dict(by_role)
    result[arm] = entry

solo = result.get("solo", {})
for arm, e in result.items():
    if "steps_per_s" in e and solo.get("steps_per_s"):
        e["relative"] = round(e["steps_per_s"] / solo["steps_per_s"], 3)
        e["p99_vs_solo"] = round(e["step_p99_ms"] / solo["step_p99_ms"], 3) if solo["step_p99_ms"] > 0 else None

# Sanity (--check): every arm ran every rep, the summaries are complete, the numbers are finite,
# positive and ordered. Deliberately no performance thresholds: CI machines are noisy.
for arm, e in result.items():
    if e["errors"]:
        problems.append(f"{arm}: {len(e['errors'])} run(s) failed: {e['errors'][0]}")
    if e["runs"] == 0:
        continue
    for r in e["per_run"]:
        vals = [r["steps_per_s"], r["step_p50_ms"], r["step_p99_ms"]]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in vals):
            problems.append(f"{arm}: a figure is not a positive number: {r}")
        elif r["step_p50_ms"] > r["step_p99_ms"]:
            problems.append(f"{arm}: step p50 above p99: {r}")
    for rep in range(reps):
        path = os.path.join(tmp, f"{arm}.{rep}.json")
        if os.path.exists(path):
            s = json.loads(open(path).read())
            if s["interrupted"] or s["measured_steps"] != steps - warmup:
                problems.append(f"{arm}: rep {rep + 1} measured {s['measured_steps']} of "
                                f"{steps - warmup} steps (interrupted: {s['interrupted']})")

targets = None
z = result.get("zernel", {})
if "relative" in z:
    targets = {"min_relative": MIN_RELATIVE, "max_p99_vs_solo": MAX_P99_RATIO,
               "relative_met": z["relative"] >= MIN_RELATIVE,
               "p99_met": z["p99_vs_solo"] is not None and z["p99_vs_solo"] <= MAX_P99_RATIO}
    targets["met"] = targets["relative_met"] and targets["p99_met"]

def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"

print()
print(f"{'arm':8s} {'steps/s':>9s} {'vs solo':>8s} {'p50 ms':>9s} {'p99 ms':>9s} {'p99/solo':>9s} "
      f"{'worst ms':>9s} {'wait ms':>8s}  notes")
for arm, e in result.items():
    notes = []
    if e["errors"]:
        notes.append(f"{len(e['errors'])} of {reps} runs failed")
    ns = e.get("nice_share", {})
    for role in ("worker", "rank", "hog"):
        if role in ns:
            top = sorted(ns[role].items(), key=lambda kv: -kv[1])[:2]
            notes.append(f"{role} nice " + "/".join(f"{k} ({round(100 * v)}%)" for k, v in top))
    print(f"{arm:8s} {fmt(e.get('steps_per_s'), '9.3f')} {fmt(e.get('relative'), '8.3f')} "
          f"{fmt(e.get('step_p50_ms'), '9.1f')} {fmt(e.get('step_p99_ms'), '9.1f')} "
          f"{fmt(e.get('p99_vs_solo'), '9.2f')} {fmt(e.get('worst_step_ms'), '9.1f')} "
          f"{fmt(e.get('data_wait_mean_ms'), '8.1f')}  "
          f"{'; '.join(notes)}")
p = result.get("periodic", {})
if "relative" in z and "relative" in p:
    print(f"phases from events (zernel) against periodic phases: {z['relative']:.3f} against "
          f"{p['relative']:.3f} of solo steps/s, step p99 {z['step_p99_ms']:.1f} against "
          f"{p['step_p99_ms']:.1f} ms")
if targets:
    print(f"zernel targets (>= {MIN_RELATIVE:.0%} of solo steps/s, p99 <= {MAX_P99_RATIO}x solo): "
          f"{'met' if targets['met'] else 'MISSED'}")
for p in problems:
    print(f"problem: {p}")
out = {"benchmark": "protection", "cpus": cpus, "hog_threads": hogs, "reps": reps, "steps": steps,
       "warmup_steps": warmup, "job": job_args, "backend": backend,
       "hogs_own_session": own_session, "autogroup": autogroup, "arms": result,
       "targets": targets}
print(json.dumps(out, separators=(",", ":")))
code = 0
if problems and check:
    code = 1
if check_targets and (targets is None or not targets["met"]):
    code = 3
sys.exit(code)
PY
rc=$?
if [[ $rc -eq 0 && $failed -ne 0 ]]; then rc=1; fi
exit "$rc"
