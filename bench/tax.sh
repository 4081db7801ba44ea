#!/usr/bin/env bash
# The tax on the rest of the node (issue 21): what a process pays per call for zernel-scheduler
# running beside it. bench_tax (bench/tax.cpp) times getppid, a FUTEX_WAKE with no waiter, a pipe
# round trip between two processes on one CPU, and a sync and a launch of the emulated libcuda,
# best of --rounds rounds each, in four conditions:
#   none     no daemon
#   idle     the daemon (--backend observe --emulated-gpu) running, following nothing
#   jobonly  a training job (zernel-workload on the emulated GPU) running, no daemon: the CPU the
#            job takes, which the next condition pays too
#   job      the daemon following that job
# and in each, twice: as a process the daemon does not follow (a CUDA process on an emulated GPU
# segment of its own, which the daemon's NVML does not list), and as one it follows (on the
# daemon's segment: found as a GPU process, measured once /status lists it). With several --bin
# directories (a build before and after a change) every condition runs each build in turn,
# --reps times, so the figures compare within one run.
#
#   bench/tax.sh [--bin DIR]... [--tax PATH] [--rounds N] [--reps N] [--cpu N] [--scale F]
#                [--job-args "ZERNEL-WORKLOAD FLAGS"] [--bpf-stats] [--keep DIR]
#
# --bpf-stats: the kernel's run-time statistics of BPF programs (kernel.bpf_stats_enabled, set
# back at exit) while the daemon runs, and, per build and condition, what each of its programs
# ran during the unfollowed measurement (runs, ns per run, taken from the daemon's descriptors'
# fdinfo): a figure the host's noise hardly moves, unlike the calls' best times. The statistics
# add two clock reads to every run of every program, so they overstate the cost a little; the
# call timings of such a run include that too.
#
# root (the daemon loads BPF). --bin defaults to build/bin; bench_tax comes from --tax (default
# build/bin/bench_tax) and is the same program for every build. Prints a table per build and
# one JSON line (per build and condition: the best figure over every round of every repetition,
# and the range of the repetitions' bests); the daemon's conditions are compared with the same
# conditions without it (idle with none, job with jobonly). Exit 1 when a run fails, 2 on a bad
# command line.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# tmp, and every default path of a daemon moved under it (the machine's are never touched)
. "$root/tests/integration/lib.sh"
bins=()
tax=$root/build/bin/bench_tax
rounds=30
reps=3
cpu=0
scale=1
keep=""
bpf_stats=0
job_args="--ranks 1 --workers 1 --steps 1000000 --data-ms 5 --gpu-ms 40 --nccl-ms 2 --optimizer-ms 4 --batch-kib 64"
usage() {
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bins+=("$(cd "$2" 2> /dev/null && pwd)") || usage; shift 2 ;;
    --tax) tax=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --cpu) cpu=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --job-args) job_args=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --bpf-stats) bpf_stats=1; shift ;;
    -h | --help) usage ;;
    *) echo "tax.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ ${#bins[@]} -gt 0 ]] || bins=("$root/build/bin")
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 ]] || { echo "tax.sh: --rounds must be a positive integer" >&2; exit 2; }
[[ $reps =~ ^[0-9]+$ && $reps -ge 1 ]] || { echo "tax.sh: --reps must be a positive integer" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "tax.sh: needs root (the daemon loads BPF)" >&2; exit 1; }
[[ -x $tax ]] || { echo "tax.sh: no bench_tax at $tax (cmake --build build --target bench_tax)" >&2; exit 1; }
for b in "${bins[@]}"; do
  for f in zernel-scheduler zernel-workload ../lib/fake/libcuda.so.1 ../lib/fake/libnvidia-ml.so.1; do
    [[ -e $b/$f ]] || { echo "tax.sh: $b/$f is missing" >&2; exit 1; }
  done
done
libcuda=${bins[0]}/../lib/fake/libcuda.so.1  # one library for every measurement

daemon_pid=""
job=""
seg=/zernel-tax-$$           # the daemon's emulated GPU (and the job's, and the followed run's)
other=/zernel-tax-$$-other   # a segment the daemon does not see
stats_was=""
cleanup() {
  [[ -n $stats_was ]] && sysctl -qw kernel.bpf_stats_enabled="$stats_was"
  [[ -n $job ]] && kill -TERM "$job" 2> /dev/null && wait "$job" 2> /dev/null
  [[ -n $daemon_pid ]] && kill -TERM "$daemon_pid" 2> /dev/null && wait "$daemon_pid" 2> /dev/null
  rm -f "/dev/shm${seg}" "/dev/shm${other}"
  if [[ -n $keep ]]; then mkdir -p "$keep" && cp -a "$tmp"/. "$keep"/; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# runtime_state_file for builds from before $ZERNEL_RUNTIME_STATE (lib.sh)
cat > "$tmp/c.toml" << TOML
[telemetry]
metrics_port = $port
[multi_tenant]
runtime_state_file = "$tmp/run/runtime-tenants.json"
TOML

fail() {
  echo "tax.sh: $*" >&2
  exit 1
}

# The pids /status lists as ML processes.
ml_pids() {
  curl -sf "http://127.0.0.1:$port/status" 2> /dev/null |
    python3 -c 'import json,sys; print(" ".join(str(t["pid"]) for t in json.load(sys.stdin)["tasks"] if t.get("ml")))' 2> /dev/null
}

run_daemon() { # BIN LABEL: lib.sh's launch_daemon with that build
  BIN=$1 daemon_config=$tmp/c.toml daemon_log=$tmp/daemon-$2.log \
    daemon_prefix="env ZERNEL_FAKE_GPU_SHM=$seg" launch_daemon --backend observe --emulated-gpu \
    --control-socket "$tmp/run/sock" || fail "the daemon ($1) did not start: $(tail -3 "$tmp/daemon-$2.log")"
  sleep 1  # its first ticks
}
end_daemon() {
  kill -TERM "$daemon_pid" 2> /dev/null
  wait "$daemon_pid" 2> /dev/null
  daemon_pid=""
}

start_job() { # BIN LABEL WITH_DAEMON
  # shellcheck disable=SC2086  # the job's flags are words
  (cd "$tmp" && ZERNEL_FAKE_GPU_SHM=$seg exec "$1/zernel-workload" --emulated-gpu --data-dir "$tmp" \
    $job_args > "$tmp/job-$2.log" 2>&1) &
  job=$!
  if [[ $3 == 0 ]]; then
    sleep 2  # its processes started and stepping
    kill -0 "$job" 2> /dev/null || fail "the job exited: $(tail -3 "$tmp/job-$2.log")"
    return
  fi
  for _ in $(seq 150); do
    [[ $(ml_pids | wc -w) -ge 1 ]] && break
    kill -0 "$job" 2> /dev/null || fail "the job exited: $(tail -3 "$tmp/job-$2.log")"
    sleep 0.1
  done
  [[ $(ml_pids | wc -w) -ge 1 ]] || fail "the daemon did not find the job in 15 s"
  sleep 1
}
stop_job() {
  kill -TERM "$job" 2> /dev/null
  wait "$job" 2> /dev/null
  job=""
}

# "PROG_ID RUN_TIME_NS RUN_CNT" of each BPF program the process holds a descriptor of.
prog_stats() { # PID
  local f
  for f in /proc/"$1"/fdinfo/*; do
    # (a link's fdinfo names its program too, without the statistics: skipped)
    awk '/^prog_id:/ {id = $2} /^run_time_ns:/ {t = $2} /^run_cnt:/ {c = $2}
         END {if (id != "" && c != "") print id, t, c}' "$f" 2> /dev/null
  done | sort -u  # in join's order
}

# What the daemon's programs ran between two prog_stats snapshots, one line per program that ran:
# "tax.sh: bpf LABEL COND: NAME (ID) RUNS runs, NS ns a run".
prog_report() { # LABEL COND BEFORE AFTER
  local name id runs ns ran=0
  while read -r id t0 c0 t1 c1; do
    runs=$((c1 - c0))
    [[ $runs -gt 0 ]] || continue
    ran=1
    ns=$(((t1 - t0) / runs))
    name=$(bpftool prog show id "$id" 2> /dev/null | sed -n '1s/.* name \([^ ]*\).*/\1/p')
    echo "tax.sh: bpf $1 $2: ${name:-prog} ($id) $runs runs, $ns ns a run" >&2
  done < <(join -a 2 -e 0 -o 0,1.2,1.3,2.2,2.3 <(echo "$3") <(echo "$4"))  # new ones from 0
  [[ $ran == 1 ]] || echo "tax.sh: bpf $1 $2: none of the daemon's $(echo "$3" | grep -c .) programs ran" >&2
}

# One bench_tax run not followed (its own segment): its JSON line.
run_unfollowed() {
  ZERNEL_FAKE_GPU_SHM=$other "$tax" --rounds "$rounds" --cpu "$cpu" --scale "$scale" \
    --libcuda "$libcuda" || fail "bench_tax failed"
}

# One bench_tax run on the daemon's segment, measured once the daemon lists it (with no daemon:
# at once).
run_followed() { # WITH_DAEMON
  local fifo=$tmp/go out=$tmp/followed.out pid=""
  rm -f "$fifo"
  mkfifo "$fifo"
  ZERNEL_FAKE_GPU_SHM=$seg "$tax" --rounds "$rounds" --cpu "$cpu" --scale "$scale" \
    --libcuda "$libcuda" --wait-go < "$fifo" > "$out" &
  local tpid=$!
  exec 3> "$fifo"
  for _ in $(seq 100); do
    pid=$(awk '/^ready/ {print $2}' "$out")
    [[ -n $pid ]] && break
    sleep 0.05
  done
  [[ -n $pid ]] || { exec 3>&-; fail "bench_tax did not get an emulated GPU context"; }
  if [[ $1 == 1 ]]; then
    for _ in $(seq 150); do
      [[ " $(ml_pids) " == *" $pid "* ]] && break
      sleep 0.1
    done
    [[ " $(ml_pids) " == *" $pid "* ]] || { exec 3>&-; fail "the daemon did not follow bench_tax ($pid) in 15 s"; }
    sleep 0.5
  fi
  echo go >&3
  exec 3>&-
  wait "$tpid" || fail "bench_tax (followed) failed"
  grep '^{' "$out"
}

results=$tmp/results.jsonl
: > "$results"
record() { # LABEL CONDITION ROLE REP JSON
  python3 -c 'import json,sys; d=json.loads(sys.argv[5]); d.update(build=sys.argv[1], condition=sys.argv[2], role=sys.argv[3], rep=int(sys.argv[4])); print(json.dumps(d))' \
    "$@" >> "$results"
}

# Each build's label: the name of its --bin's parent (build, u1-base), with its position added
# where two share a name (two trees' build/bin), so that their figures are not merged.
declare -A seen
labels=()
for i in "${!bins[@]}"; do
  l=$(basename "$(dirname "${bins[$i]}")")
  [[ -n ${seen[$l]:-} ]] && l="$l-$((i + 1))"
  seen[$l]=1
  labels+=("$l")
done
if [[ $bpf_stats == 1 ]]; then
  command -v bpftool > /dev/null || PATH=$PATH:$root/build/_deps/bpf/bin
  stats_was=$(sysctl -n kernel.bpf_stats_enabled) || fail "no kernel.bpf_stats_enabled"
  sysctl -qw kernel.bpf_stats_enabled=1 || fail "could not set kernel.bpf_stats_enabled"
fi
echo "tax.sh: ${#bins[@]} build(s) x 4 conditions x $reps repetitions, best of $rounds rounds; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for rep in $(seq "$reps"); do
  for cond in none idle jobonly job; do
    for i in "${!bins[@]}"; do
      b=${bins[$i]} label=${labels[$i]}
      daemon_on=0
      [[ $cond == idle || $cond == job ]] && daemon_on=1
      [[ $daemon_on == 1 ]] && run_daemon "$b" "$label"
      [[ $cond == job* ]] && start_job "$b" "$label" "$daemon_on"
      [[ $bpf_stats == 1 && $daemon_on == 1 ]] && before=$(prog_stats "$daemon_pid")
      record "$label" "$cond" unfollowed "$rep" "$(run_unfollowed)"
      [[ $bpf_stats == 1 && $daemon_on == 1 ]] &&
        prog_report "$label" "$cond rep $rep" "$before" "$(prog_stats "$daemon_pid")"
      record "$label" "$cond" followed "$rep" "$(run_followed "$daemon_on")"
      [[ $cond == job* ]] && stop_job
      [[ $daemon_on == 1 ]] && end_daemon
      echo "tax.sh: rep $rep $cond $label done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
done

python3 - "$results" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
builds = list(dict.fromkeys(r["build"] for r in rows))
conds = [("none", None), ("idle", "none"), ("jobonly", None), ("job", "jobonly")]
figures = [("getppid_ns", "unfollowed", "getppid()"),
           ("futex_wake_ns", "unfollowed", "FUTEX_WAKE, no waiter"),
           ("pipe_rtt_ns", "unfollowed", "pipe round trip, one CPU"),
           ("cuda_sync_ns", "unfollowed", "cuStreamSynchronize, unfollowed process"),
           ("cuda_launch_ns", "unfollowed", "launch, unfollowed process"),
           ("cuda_sync_ns", "followed", "cuStreamSynchronize, followed process"),
           ("cuda_launch_ns", "followed", "launch, followed process")]
out = {}
for b in builds:
    print(f"\n{b}: ns per call, best of every round (range of the repetitions' bests); "
          "% against the same machine without the daemon")
    print("| what a task pays | no daemon | daemon, nothing followed | a job, no daemon "
          "| daemon following the job |")
    print("| --- | --- | --- | --- | --- |")
    for key, role, name in figures:
        cells = []
        best_of = {}
        for c, against in conds:
            vals = [r[key] for r in rows
                    if r["build"] == b and r["condition"] == c and r["role"] == role]
            if not vals:
                cells.append("-")
                continue
            best = best_of[c] = min(vals)
            out.setdefault(b, {}).setdefault(c, {})[f"{role}_{key}"] = {"best": best, "reps": vals}
            base = best_of.get(against) if against else None
            pct = f" ({100 * (best / base - 1):+.1f} %)" if base else ""
            rng = f" ({min(vals):,.0f}-{max(vals):,.0f})" if len(vals) > 1 else ""
            cells.append(f"{best:,.0f}{rng}{pct}")
        print(f"| {name} | " + " | ".join(cells) + " |")
print(json.dumps(out))
PY
