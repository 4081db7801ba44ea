#!/usr/bin/env bash
# What a launch probe costs a launch-bound job (issue 21 item 3): zernel-workload on the emulated
# GPU with --kernels N (forward + backward's device time as N small kernels a step, each a launch
# of the emulated driver, as a framework's thousands of small kernels), its step time with no
# daemon and with each given build's daemon following it (--backend observe --emulated-gpu). A
# build whose probes trap on every launch (a uprobe on zfgEnqueueWork / cuLaunchKernel*) makes the
# job's thread pay that trap N times a step; one that does not probe launches costs it nothing.
# The job is the same binary for every arm (--workload), so only the daemon differs; arms run in
# turn within each repetition, so they compare within one run.
#
#   bench/launch_tax.sh [--bin DIR]... [--workload PATH] [--kernels N] [--gpu-ms MS] [--steps N]
#                       [--reps N]
#
# root (the daemon loads BPF). --bin: a build's bin/ with zernel-scheduler (default build/bin);
# --workload defaults to build/bin/zernel-workload. Prints per arm and repetition the step p50,
# mean and p99 (ms, over the last two thirds of the steps: the first third, about 3 s at the
# defaults, is a warm-up that covers the daemon's discovery of the job and its attach), and a
# JSON line per arm with the medians over repetitions. Exit 1 when a run fails, 2 on a bad
# command line.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# tmp, and every default path of a daemon moved under it (the machine's are never touched)
. "$root/tests/integration/lib.sh"
bins=()
workload=$root/build/bin/zernel-workload
kernels=5000
gpu_ms=2
steps=3000
reps=2
usage() {
  awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bins+=("$(cd "$2" 2> /dev/null && pwd)") || usage; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --gpu-ms) gpu_ms=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -h | --help) usage ;;
    *) echo "launch_tax.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ ${#bins[@]} -gt 0 ]] || bins=("$root/build/bin")
for n in "$kernels" "$steps" "$reps"; do
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || { echo "launch_tax.sh: --kernels, --steps and --reps must be positive integers" >&2; exit 2; }
done
[[ $steps -ge 300 ]] || { echo "launch_tax.sh: --steps must be at least 300 (the first third is a warm-up)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "launch_tax.sh: needs root (the daemon loads BPF)" >&2; exit 1; }
[[ -x $workload ]] || { echo "launch_tax.sh: no zernel-workload at $workload" >&2; exit 1; }
for b in "${bins[@]}"; do
  [[ -x $b/zernel-scheduler ]] || { echo "launch_tax.sh: $b/zernel-scheduler is missing" >&2; exit 1; }
done

seg=/zernel-launch-tax-$$
port=$(free_port)
cat > "$tmp/c.toml" << TOML
[telemetry]
metrics_port = $port
[multi_tenant]
runtime_state_file = "$tmp/run/runtime-tenants.json"
TOML
daemon_pid=""
cleanup() {
  [[ -n $daemon_pid ]] && kill -TERM "$daemon_pid" 2> /dev/null && wait "$daemon_pid" 2> /dev/null
  rm -f "/dev/shm${seg}"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "launch_tax.sh: $*" >&2; exit 1; }

# One job, with the daemon of build $1 following it ("none": no daemon): its summary line.
run_arm() { # BIN|none LABEL
  if [[ $1 != none ]]; then
    BIN=$1 daemon_config=$tmp/c.toml daemon_log=$tmp/daemon-$2.log \
      daemon_prefix="env ZERNEL_FAKE_GPU_SHM=$seg" launch_daemon --backend observe --emulated-gpu ||
      { kill -TERM "$daemon_pid" 2> /dev/null; die "the daemon of $1 did not start: $(tail -3 "$tmp/daemon-$2.log")"; }
    sleep 1
  fi
  local out
  out=$(cd "$tmp" && ZERNEL_FAKE_GPU_SHM=$seg "$workload" --emulated-gpu --data-dir "$tmp" --ranks 1 --workers 1 --steps "$steps" \
    --warmup-steps $((steps / 3)) --data-ms 0.5 --gpu-ms "$gpu_ms" --kernels "$kernels" --nccl-ms 0 \
    --optimizer-ms 0.5 --batch-kib 16 2> "$tmp/job-$2.err") ||
    { [[ $1 == none ]] || stop_daemon; die "the job failed: $(tail -3 "$tmp/job-$2.err")"; }
  # This runs in $(...), whose exit the script's cleanup trap does not see: the daemon is stopped
  # here, also when the job fails (lib.sh's stop_daemon).
  [[ $1 == none ]] || stop_daemon
  grep '^{' <<< "$out" | tail -1
}

arms=(none "${bins[@]}")
results=$tmp/results.jsonl
: > "$results"
for rep in $(seq "$reps"); do
  i=0
  for a in "${arms[@]}"; do
    label=none
    [[ $a == none ]] || label="$i:$(basename "$(dirname "$a")")"
    line=$(run_arm "$a" "$rep-$i") || exit 1
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"arm": sys.argv[2], "rep": int(sys.argv[3]), "p50": d["step_p50_ms"], "mean": d["step_mean_ms"], "p99": d["step_p99_ms"]}))' \
      "$line" "$label" "$rep" >> "$results"
    echo "launch_tax.sh: rep $rep arm $label done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    i=$((i + 1))
  done
done

python3 - "$results" "$kernels" "$gpu_ms" << 'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
kernels, gpu_ms = int(sys.argv[2]), float(sys.argv[3])
arms = []
for r in rows:
    if r["arm"] not in arms:
        arms.append(r["arm"])
base = statistics.median(r["mean"] for r in rows if r["arm"] == "none")
print(f"{kernels} kernels a step ({gpu_ms} ms of device time), step ms per repetition (p50 / mean / p99):")
for a in arms:
    rs = [r for r in rows if r["arm"] == a]
    mean = statistics.median(r["mean"] for r in rs)
    reps = ", ".join(f"{r['p50']:.3f} / {r['mean']:.3f} / {r['p99']:.3f}" for r in rs)
    extra = (mean - base) * 1000.0 / kernels
    print(f"  {a:<24} {reps}   mean {mean:.3f} ms, {extra:+.3f} us per launch against no daemon")
    print(json.dumps({"arm": a, "step_mean_ms": mean, "us_per_launch_vs_none": round(extra, 4),
                      "step_p50_ms": statistics.median(r["p50"] for r in rs),
                      "step_p99_ms": statistics.median(r["p99"] for r in rs)}))
PY
