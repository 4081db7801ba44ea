#!/usr/bin/env bash
# What each kernel hook the probes could use costs every task of the machine, with an empty
# program on it: bench_tax (bench/tax.cpp, without CUDA) with nothing attached, then with each
# of the programs of bench/tax_alternatives.bpf.c attached alone (a syscall tracepoint, the raw
# sys_enter tracepoint, the BTF sched_switch tracepoint, fentry on futex_wait), --reps times in
# turn; and on sched_switch the probes' own first test (the follow bitmap, where their program
# leaves for every task nobody follows), against which the empty one there is the floor of any
# program on that hook; and a program on one sleeping process's own software context-switch
# perf event (bench/switch_event.cpp holds it), which runs for that process's threads alone and
# leaves every other task the perf hooks' tests. A hook the kernel refuses is reported as such.
# Docs: docs/benchmarks.md, "The tax on the rest of the node".
#
#   bench/tax_alternatives.sh [--tax PATH] [--rounds N] [--reps N] [--cpu N]
#
# root. Needs clang-19 and the build's bpftool and vmlinux.h (build/_deps/bpf). The programs
# are pinned in a bpffs of a private mount namespace, so they go when the script ends.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tax=$root/build/bin/bench_tax
switch_event=$root/build/bin/switch_event
rounds=5 reps=3 cpu=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --tax) tax=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --cpu) cpu=$2; shift 2 ;;
    *) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2 ;;
  esac
done
deps=$root/build/_deps/bpf
bpftool=$deps/bin/bpftool
clang=${ZERNEL_CLANG:-clang-19}
[[ $(id -u) -eq 0 ]] || { echo "tax_alternatives.sh: needs root" >&2; exit 1; }
for f in "$tax" "$switch_event" "$bpftool" "$deps/vmlinux.h"; do
  [[ -e $f ]] || { echo "tax_alternatives.sh: $f is missing (build the project first)" >&2; exit 1; }
done
tmp=$(mktemp -d)
# The process whose own switches hook 6 follows: asleep throughout.
sleep infinity &
sleeper=$!
trap 'kill $sleeper 2> /dev/null; rm -rf "$tmp"' EXIT
names=(none "tracepoint syscalls:sys_enter_futex" "raw_tp sys_enter" "tp_btf sched_switch" "fentry futex_wait"
  "tp_btf sched_switch, the probes' first test" "perf_event: one sleeping process's own context switches")
for n in 1 2 3 4 5 6; do
  "$clang" -O2 -g -target bpf -DZERNEL_ALT=$n -I"$deps" -I"$deps/include" -I"$root/bpf" \
    -c "$root/bench/tax_alternatives.bpf.c" -o "$tmp/alt$n.o" 2> "$tmp/clang$n.log" ||
    { echo "tax_alternatives.sh: compiling hook $n failed: $(tail -2 "$tmp/clang$n.log")" >&2; exit 1; }
done
# In a mount namespace of its own: bpffs for the pins, gone with the namespace.
unshare -m bash -s "$tmp" "$bpftool" "$tax" "$rounds" "$reps" "$cpu" "$switch_event" "$sleeper" "${names[@]}" << 'INNER' | tee "$tmp/results.jsonl"
tmp=$1 bpftool=$2 tax=$3 rounds=$4 reps=$5 cpu=$6 switch_event=$7 sleeper=$8
shift 8
names=("$@")
mount --make-rprivate / && mkdir -p "$tmp/bpffs" && mount -t bpf bpf "$tmp/bpffs" || exit 1
for rep in $(seq "$reps"); do
  for n in 0 1 2 3 4 5 6; do
    if [[ $n -eq 6 ]]; then
      coproc holder { "$switch_event" "$tmp/alt6.o" "$sleeper" 2> "$tmp/load6.log"; }
      if ! read -r -u "${holder[0]}" ready || [[ $ready != ready* ]]; then
        echo "{\"hook\": \"${names[$n]}\", \"rep\": $rep, \"refused\": \"$(tail -1 "$tmp/load6.log" | tr -d '"\\')\"}"
        continue
      fi
    elif [[ $n -gt 0 ]]; then
      if ! "$bpftool" prog loadall "$tmp/alt$n.o" "$tmp/bpffs/alt$n" autoattach > "$tmp/load$n.log" 2>&1; then
        echo "{\"hook\": \"${names[$n]}\", \"rep\": $rep, \"refused\": \"$(grep -o 'failed to load[^"]*' "$tmp/load$n.log" | head -1)\"}"
        rm -rf "$tmp/bpffs/alt$n"
        continue
      fi
    fi
    line=$("$tax" --no-cuda --rounds "$rounds" --cpu "$cpu")
    echo "{\"hook\": \"${names[$n]}\", \"rep\": $rep, ${line#\{}"
    if [[ $n -eq 6 ]]; then
      exec {holder[1]}>&-
      wait "$holder_PID"
    elif [[ $n -gt 0 ]]; then
      rm -rf "$tmp/bpffs/alt$n"
    fi
  done
done
INNER
python3 - "$tmp/results.jsonl" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
hooks = list(dict.fromkeys(r["hook"] for r in rows))
keys = [("getppid_ns", "getppid()"), ("futex_wake_ns", "FUTEX_WAKE, no waiter"),
        ("pipe_rtt_ns", "pipe round trip, one CPU")]
base = {k: min(r[k] for r in rows if r["hook"] == "none") for k, _ in keys}
med = lambda v: sorted(v)[len(v) // 2]
base_med = {k: med([r[k] for r in rows if r["hook"] == "none"]) for k, _ in keys}
print("Best of the repetitions (against none's best); median of the repetitions (against none's median):")
print("| hook (empty program, but the last) | " + " | ".join(n for _, n in keys) + " |")
print("| --- |" + " --- |" * len(keys))
for h in hooks:
    got = [r for r in rows if r["hook"] == h]
    if all("refused" in r for r in got):
        print(f"| {h} | refused: {got[0]['refused']} |")
        continue
    cells = []
    for k, _ in keys:
        vals = [r[k] for r in got if k in r]
        best, m = min(vals), med(vals)
        cells.append(f"{best:,.0f}; {m:,.0f} ns" if h == "none" else
                     f"{best:,.0f} ({100 * (best / base[k] - 1):+.1f} %); {m:,.0f} ns ({100 * (m / base_med[k] - 1):+.1f} %)")
    print(f"| {h} | " + " | ".join(cells) + " |")
PY
