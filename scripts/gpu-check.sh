#!/usr/bin/env bash
# The real-GPU check (issue 22, item 8): on a machine with an NVIDIA GPU, its driver and a CUDA
# build of PyTorch, run a short real training loop (tools/torch_job.py --device cuda: DataLoader
# workers, a sync per step, an optimizer step on the GPU, helper threads, pin_memory off and on)
# under zernel-scheduler --backend observe --phase-log-threads, and print
#   1. which driver entry points the job's syncs and launches reach: tracefs uprobe hits on
#      libcuda's exported sync and launch symbols (what the scheduler's probes attach to) and on
#      libcudart's (scripts/gpu_check.py), beside the daemon's own probe counters;
#   2. NVML's per-process samples of the job (how many, how often a new one, smUtil);
#   3. the per-thread phase accuracy against the loop's own truth (bench/phase_accuracy.py
#      --threads: main thread per phase, workers, pin-memory and NCCL-like proxy threads, the
#      helpers' share of time in a boosted phase).
#
#   scripts/gpu-check.sh [--emulated] [--steps N] [--build-dir DIR] [--keep DIR]
#   scripts/gpu-check.sh --bundle DIR [--build-dir DIR]
#
# Binaries, in this order: DIR/bin of a bundle found at $ZERNEL_GPU_CHECK_BUNDLE or
# .gpu-check-bundle/ in the repository (made with --bundle on a Debian 12 development machine:
# zernel-scheduler, stripped, with the shared libraries it needs beside it, and the emulated GPU;
# carry that folder to the GPU machine, which may have neither the build's packages nor a network);
# else the build directory (default build/) if its zernel-scheduler runs; else it configures and
# builds only zernel-scheduler there (-DZERNEL_BPF=ON needs the kernel's source for the BPF
# toolchain, which a machine without a network cannot fetch: then it says so and stops).
#
# --emulated runs the same path on a machine without a GPU: the emulated GPU (tools/fake_gpu,
# `--device emulated` of torch_job.py and the daemon's --emulated-gpu) and Debian's CPU PyTorch;
# tests/integration/gpu_check_test.sh runs it so. --steps (default 30) per job; --keep DIR keeps
# the logs. Needs root (BPF probes, tracefs uprobes). Exit status: 0 when everything ran (the
# figures are printed, not judged), 1 when a part failed, 2 on a usage or set-up error.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
emulated=0
steps=30
build=$src/build
keep=""
bundle_out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --emulated) emulated=1; shift ;;
    --steps) steps=${2:-}; shift 2 ;;
    --build-dir) build=${2:-}; shift 2 ;;
    --keep) keep=${2:-}; shift 2 ;;
    --bundle) bundle_out=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --steps must be a positive integer" >&2; exit 2; }
say() { echo "gpu-check: $*"; }
die() { echo "gpu-check: $*" >&2; exit 2; }

# --bundle: what the GPU machine needs, from this machine's build.
if [[ -n $bundle_out ]]; then
  exe=$build/bin/zernel-scheduler
  [[ -x $exe ]] || die "$exe is not built (cmake --build $build --target zernel-scheduler fake_cuda fake_nvml)"
  rm -rf "$bundle_out" && mkdir -p "$bundle_out/bin" "$bundle_out/lib/fake" || exit 2
  strip -o "$bundle_out/bin/zernel-scheduler" "$exe" || cp "$exe" "$bundle_out/bin/"
  cp "$build"/lib/fake/lib*.so.1 "$bundle_out/lib/fake/" 2>/dev/null
  # Every shared library it loads but the C library's own (the GPU machine's glibc is used).
  ldd "$exe" | awk '/=> \//{print $3}' |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv)\.so|/ld-linux' |
    while read -r lib; do cp -L "$lib" "$bundle_out/lib/"; done
  git -C "$src" rev-parse HEAD > "$bundle_out/commit" 2>/dev/null
  say "bundle in $bundle_out ($(du -sh "$bundle_out" | cut -f1)): carry it to the GPU machine as" \
    ".gpu-check-bundle/ in the repository (or point ZERNEL_GPU_CHECK_BUNDLE at it)"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "run as root (BPF probes, tracefs uprobes, /proc/PID/syscall)"
t_start=$(date +%s)

# 1. Binaries.
bundle=${ZERNEL_GPU_CHECK_BUNDLE:-$src/.gpu-check-bundle}
sched="" fake=""
if [[ -x $bundle/bin/zernel-scheduler ]] &&
  LD_LIBRARY_PATH=$bundle/lib "$bundle/bin/zernel-scheduler" --version > /dev/null 2>&1; then
  sched=$bundle/bin/zernel-scheduler
  export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fake=$bundle/lib/fake
  say "binaries: the bundle in $bundle (commit $(cat "$bundle/commit" 2>/dev/null || echo unknown))"
elif [[ -x $build/bin/zernel-scheduler ]] && "$build/bin/zernel-scheduler" --version > /dev/null 2>&1; then
  sched=$build/bin/zernel-scheduler
  fake=$build/lib/fake
  say "binaries: $build"
else
  say "no bundle and no working build: building zernel-scheduler in $build"
  if ! cmake -S "$src" -B "$build" -DZERNEL_BUILD_TESTS=OFF -DZERNEL_BUILD_BENCH=OFF \
      > "$build.configure.log" 2>&1; then
    tail -n 15 "$build.configure.log" >&2
    die "configuring failed (log: $build.configure.log). A machine without the build's Debian" \
      "packages or a network cannot build it: make a bundle on a development machine" \
      "(scripts/gpu-check.sh --bundle .gpu-check-bundle) and carry it here"
  fi
  targets=(zernel-scheduler)
  [[ $emulated -eq 1 ]] && targets+=(fake_cuda fake_nvml)
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" > "$build.build.log" 2>&1 ||
    { tail -n 15 "$build.build.log" >&2; die "building failed (log: $build.build.log)"; }
  sched=$build/bin/zernel-scheduler
  fake=$build/lib/fake
fi

# 2. The machine.
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" > /dev/null && "$p" -c 'import torch' 2> /dev/null; then py=$p; break; fi
done
[[ -n $py ]] || die "no python3 with torch"
say "kernel $(uname -r); BTF $([[ -e /sys/kernel/btf/vmlinux ]] && echo yes || echo 'no (the BPF probes cannot load)')"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2> /dev/null ||
  say "tracefs is not mounted and cannot be (no futex counts, no uprobe counts)"
say "torch $("$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "devices", torch.cuda.device_count() if torch.version.cuda else 0)' 2>&1)"
if [[ $emulated -eq 1 ]]; then
  [[ -f $fake/libcuda.so.1 && -f $fake/libnvidia-ml.so.1 ]] || die "the emulated GPU is not built in $fake"
  export ZERNEL_FAKE_GPU_SHM="/zernel-gpu-check-$$"
  device=(--device emulated --libcuda "$fake/libcuda.so.1")
  nvml=$fake/libnvidia-ml.so.1
  daemon_gpu=(--emulated-gpu)
  say "emulated GPU ($fake)"
else
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader |
    sed 's/^/gpu-check: GPU: /'
  "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    die "this PyTorch sees no CUDA device"
  device=(--device cuda)
  nvml=libnvidia-ml.so.1
  daemon_gpu=()
fi

tmp=$(mktemp -d)
dpid="" jpid="" wpid=""
cleanup() {
  [[ -n $wpid ]] && kill -TERM "$wpid" 2> /dev/null && wait "$wpid" 2> /dev/null
  [[ -n $jpid ]] && kill -TERM "$jpid" 2> /dev/null && wait "$jpid" 2> /dev/null
  [[ -n $dpid ]] && kill -TERM "$dpid" 2> /dev/null && wait "$dpid" 2> /dev/null
  [[ -n ${ZERNEL_FAKE_GPU_SHM:-} ]] && rm -f "/dev/shm$ZERNEL_FAKE_GPU_SHM"
  [[ -n $keep ]] && mkdir -p "$keep" && cp -a "$tmp"/. "$keep"/
  rm -rf "$tmp"
}
trap cleanup EXIT
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf '[telemetry]\nmetrics_port = %s\n' "$port" > "$tmp/config.toml"
failed=0

# 3. One job per pin_memory setting, each under its own daemon.
for pin in off on; do
  pin_flag=()
  [[ $pin == on ]] && pin_flag=(--pin-memory)
  "$sched" --config "$tmp/config.toml" --backend observe "${daemon_gpu[@]}" --control-socket '' \
    --phase-log "$tmp/phases-$pin.jsonl" --phase-log-threads > "$tmp/daemon-$pin.log" 2>&1 &
  dpid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/metrics" > /dev/null 2>&1 && break
    kill -0 "$dpid" 2> /dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$dpid" 2> /dev/null; then
    cat "$tmp/daemon-$pin.log" >&2
    die "the daemon did not start"
  fi
  grep -iE 'probe|bpf|nvml' "$tmp/daemon-$pin.log" | head -n 5 | sed 's/^/gpu-check: daemon: /'
  "$py" "$src/tools/torch_job.py" "${device[@]}" --steps "$steps" --helpers "${pin_flag[@]}" \
    --truth-log "$tmp/truth-$pin.jsonl" > "$tmp/job-$pin.json" 2> "$tmp/job-$pin.err" &
  jpid=$!
  "$py" "$here/gpu_check.py" watch --pid "$jpid" --nvml "$nvml" --out "$tmp/watch-$pin.json" \
    2> "$tmp/watch-$pin.err" &
  wpid=$!
  wait "$jpid"
  jrc=$?
  jpid=""
  wait "$wpid"
  wpid=""
  sleep 0.3  # the daemon's last ticks see the job end
  curl -s "http://127.0.0.1:$port/metrics" > "$tmp/metrics-$pin.txt"
  kill -TERM "$dpid"
  wait "$dpid"
  dpid=""
  echo
  echo "=== pin_memory $pin: the job (exit $jrc)"
  cat "$tmp/job-$pin.json"
  if [[ $jrc -ne 0 ]]; then
    tail -n 20 "$tmp/job-$pin.err"
    failed=1
    continue
  fi
  echo "--- 1. driver entry points reached (tracefs uprobe hits during the job; null: not hit" \
    "while probed, absent: the file has no such symbol)"
  "$py" - "$tmp/watch-$pin.json" "$tmp/metrics-$pin.txt" <<'PY' || failed=1
import json, re, sys
w = json.load(open(sys.argv[1]))
up = w["uprobes"]
if "error" in up:
    print("  uprobes:", up["error"])
for lib in ("libcuda", "libcudart"):
    e = up.get(lib)
    if not e:
        print(f"  {lib}: {w['libraries'].get(lib, 'not mapped by the job')}")
        continue
    hits = ", ".join(f"{s} {n if n is not None else 0}" for s, n in sorted(e["hits"].items()))
    print(f"  {lib} ({e['path']}): {hits}")
kinds = dict(re.findall(r'zernel_scheduler_probe_events_total\{kind="([a-z_]+)"\} (\d+)',
                        open(sys.argv[2]).read()))
print("  the daemon's probes:", ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or
      "no probe counters (probes off?)")
n = w["nvml"]
print("--- 2. NVML per-process samples of the job")
if n["error"]:
    print("  NVML:", n["error"])
print(f"  devices {n['devices']}, polls {n['polls']}, samples {n['samples']}, distinct"
      f" timestamps {n['distinct_timestamps']}, interval between new samples (ms)"
      f" {n['sample_interval_ms']}, smUtil {n['sm_util']}")
PY
  echo "--- 3. phase accuracy against the loop's truth, per process and per thread"
  python3 "$src/bench/phase_accuracy.py" "$tmp/truth-$pin.jsonl" "$tmp/phases-$pin.jsonl" \
    --label "gpu-check pin_memory $pin" || { [[ $? -le 1 ]] || failed=1; }
  python3 "$src/bench/phase_accuracy.py" "$tmp/truth-$pin.jsonl" "$tmp/phases-$pin.jsonl" \
    --threads --label "gpu-check pin_memory $pin per thread" || { [[ $? -le 1 ]] || failed=1; }
done
say "done in $(($(date +%s) - t_start)) s"
exit $failed
