#!/usr/bin/env bash
# bench/phase_accuracy.py on hand-made logs whose figures are known: time-weighted accuracy per
# phase, process and role, reaction times and missed changes, per-thread lines ignored (or scored
# with --threads), per-thread truth with roles (helpers' boosted share, a pin-memory thread's
# accuracy, threads the truth does not name), --require passing and failing (exit 1), and bad
# input (exit 2, a message).
# Needs only python3.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$tmp"' EXIT
score=$SRC/bench/phase_accuracy.py

# Times in ms from 1 s, as ns. Rank 10: Unknown 100, GpuCompute 100, OptimizerStep 100, then
# DataLoading 100 that the detector never shows (missed), exit. Worker 11: Unknown 50,
# DataLoading 200, exit.
line() { printf '{"t_ns": %d, "pid": %d, "phase": "%s"%s}\n' "$((1000000000 + $1 * 1000000))" "$2" "$3" "${4:-}"; }
{
  line 0 10 Unknown; line 100 10 GpuCompute; line 200 10 OptimizerStep; line 300 10 DataLoading
  line 400 10 Unknown; line 0 11 Unknown; line 50 11 DataLoading; line 250 11 Unknown
} > "$tmp/truth.jsonl"
# GpuCompute 1 ms late, OptimizerStep 50 ms late, a per-thread line of another thread (ignored
# by default), the worker 10 ms late; a process that is not in the truth (ignored).
{
  line 101 10 GpuCompute; line 150 10 DataLoading ', "tid": 12'; line 250 10 OptimizerStep ', "tid": 10'
  line 60 11 DataLoading; line 5 99 GpuCompute
} > "$tmp/phases.jsonl"

python3 "$score" "$tmp/truth.jsonl" "$tmp/phases.jsonl" --require accuracy=0.7 > "$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
check "thresholds met: exit 0 (got $rc)" "[[ $rc -eq 0 ]]"
python3 - "$tmp/out" <<'PY' && pass || fail "the figures of the hand-made logs"
import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
# Rank: 100 + 99 + 50 + 0 of 400 ms right; worker: 50 + 190 of 250 ms.
assert abs(o["roles"]["rank"]["accuracy_pct"] - 62.25) < 0.01, o["roles"]["rank"]
assert abs(o["roles"]["worker"]["accuracy_pct"] - 96.0) < 0.01, o["roles"]["worker"]
assert abs(o["accuracy_pct"] - 100.0 * 489 / 650) < 0.01, o["accuracy_pct"]
ph = o["phases"]
assert ph["GpuCompute"]["accuracy_pct"] == 99.0 and ph["OptimizerStep"]["accuracy_pct"] == 50.0, ph
assert ph["DataLoading"]["accuracy_pct"] == round(100.0 * 190 / 300, 2), ph
r = o["reaction_ms"]
# Changes: rank GpuCompute (1 ms), OptimizerStep (50 ms), DataLoading (missed); worker (10 ms).
assert (r["changes"], r["already"], r["missed"], r["p50"], r["p99"], r["max"]) == (4, 0, 1, 10.0, 50.0, 50.0), r
assert [p["pid"] for p in o["processes"]] == [10, 11], o["processes"]
PY

python3 "$score" "$tmp/truth.jsonl" "$tmp/phases.jsonl" \
  --require "p99_ms=2,worker.phase_accuracy=0.96,missed=0" > "$tmp/out" 2> "$tmp/err"
rc=$?
cat "$tmp/err"
check "thresholds missed: exit 1 (got $rc)" "[[ $rc -eq 1 ]]"
check "each miss is named" "grep -q 'reaction p99 50.0 ms > 2 ms' $tmp/err &&
  grep -q 'worker: DataLoading accuracy 95.0 % < 96 %' $tmp/err && grep -q '1 changes missed' $tmp/err"

# --threads: the tid 12 line is scored as thread 12 (not in the truth: a thread of pid 10 the
# truth does not name, DataLoading from 150 ms to the end of pid 10's truth at 400), so the main
# thread (a rank's role per thread) loses nothing by it; the tid 10 line still counts for pid 10.
python3 "$score" "$tmp/truth.jsonl" "$tmp/phases.jsonl" --threads --quiet > "$tmp/out" 2>&1
python3 - "$tmp/out" <<'PY' && pass || fail "--threads scores per-thread lines under their tid"
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert o["roles"]["main"]["accuracy_pct"] == 62.25, o["roles"]
assert o["unnamed_threads"] == [{"tid": 12, "pid": 10, "lines": 1, "boosted_s_at_most": 0.25}], o
PY
check "--quiet prints only the JSON line" "[[ \$(wc -l < $tmp/out) -eq 1 ]]"

# Per-thread truth (the format of --phase-log-threads, with a role per thread): pid 10's main
# thread 10 (Unknown, GpuCompute 100, OptimizerStep 200, exit 400), a reader 12 and a logger 13
# (no phase all their life, 0..400), a pin-memory thread 14 (DataLoading 100..200). The detector:
# the main thread right throughout; the reader DataLoading from 150 (boosted 250 of 400 ms), the
# logger OptimizerStep from 390 (10 ms), the pin-memory thread DataLoading 50..250 (right 300 of
# 400 ms, boosted 100 of its 300 ms of Unknown), and a thread 15 the truth does not name.
tline() { line "$1" 10 "$3" ", \"tid\": $2, \"role\": \"$4\""; }
{
  tline 0 10 Unknown main; tline 100 10 GpuCompute main; tline 200 10 OptimizerStep main
  tline 0 12 Unknown reader; tline 0 13 Unknown logger; tline 0 14 Unknown pin_memory
  tline 100 14 DataLoading pin_memory; tline 200 14 Unknown pin_memory
  tline 400 10 Unknown main; tline 400 12 Unknown reader; tline 400 13 Unknown logger
  tline 400 14 Unknown pin_memory
} > "$tmp/truth3.jsonl"
dline() { line "$1" 10 "$3" ", \"tid\": $2"; }
{
  line 100 10 GpuCompute; dline 100 10 GpuCompute; line 200 10 OptimizerStep; dline 200 10 OptimizerStep
  dline 150 12 DataLoading; dline 390 13 OptimizerStep; dline 50 14 DataLoading; dline 250 14 Unknown
  dline 300 15 DataLoading
} > "$tmp/phases3.jsonl"
python3 "$score" "$tmp/truth3.jsonl" "$tmp/phases3.jsonl" --threads \
  --require "main.accuracy=1,reader.boosted=0.7,logger.boosted=0.05,pin_memory.accuracy=0.75" \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
cat "$tmp/out" "$tmp/err"
check "per-thread thresholds met: exit 0 (got $rc)" "[[ $rc -eq 0 ]]"
python3 - "$tmp/out" <<'PY' && pass || fail "the per-thread figures of the hand-made logs"
import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
r = o["roles"]
assert list(r) == ["main", "pin_memory", "helper", "reader", "logger"], list(r)
assert r["main"]["accuracy_pct"] == 100.0 and r["main"]["boosted_pct"] == 0.0, r["main"]
assert r["reader"]["boosted_pct"] == 62.5 and r["reader"]["accuracy_pct"] == 37.5, r["reader"]
assert r["logger"]["boosted_pct"] == 2.5 and r["logger"]["boosted_s"] == 0.01, r["logger"]
assert r["helper"]["boosted_pct"] == 32.5 and r["helper"]["count"] == 2, r["helper"]
p = r["pin_memory"]
assert p["accuracy_pct"] == 75.0 and p["boosted_pct"] == round(100 / 3, 2), p
assert p["phases"]["DataLoading"]["accuracy_pct"] == 100.0, p
assert [(t["tid"], t["role"]) for t in o["threads"]] == [(10, "main"), (12, "reader"), (13, "logger"), (14, "pin_memory")], o["threads"]
assert [u["tid"] for u in o["unnamed_threads"]] == [15] and o["unnamed_threads"][0]["boosted_s_at_most"] == 0.1, o
PY
python3 "$score" "$tmp/truth3.jsonl" "$tmp/phases3.jsonl" --threads \
  --require "helper.boosted=0.3,nccl_proxy.boosted=0.05" > "$tmp/out" 2> "$tmp/err"
rc=$?
cat "$tmp/err"
check "per-thread thresholds missed: exit 1 (got $rc), each named" "[[ $rc -eq 1 ]] &&
  grep -q 'helper: boosted 32.5 % > 30 %' $tmp/err && grep -q 'nccl_proxy: no thread of this role' $tmp/err"
# Per process, the same logs: only pid 10's own lines (its main thread) count, as a rank.
python3 "$score" "$tmp/truth3.jsonl" "$tmp/phases3.jsonl" --quiet --require rank.accuracy=1 > "$tmp/out" 2>&1
rc=$?
python3 - "$tmp/out" <<'PY' && pass || fail "per process, helper threads' lines leave the process's figures alone (exit $rc)"
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert [p["pid"] for p in o["processes"]] == [10] and o["roles"]["rank"]["accuracy_pct"] == 100.0, o
PY

# A detector stuck in a phase: the truth's return to it counts "already" (reaction 0), the change
# away from it is missed. Worker 20: Unknown 100, DataLoading 100 (shown 10 ms late), Unknown 100
# (never shown), DataLoading 100 (already shown), exit.
{ line 0 20 Unknown; line 100 20 DataLoading; line 200 20 Unknown; line 300 20 DataLoading; line 400 20 Unknown; } \
  > "$tmp/truth2.jsonl"
line 110 20 DataLoading > "$tmp/phases2.jsonl"
python3 "$score" "$tmp/truth2.jsonl" "$tmp/phases2.jsonl" --quiet > "$tmp/out" 2>&1
python3 - "$tmp/out" <<'PY' && pass || fail "a stuck detector: changes already shown and missed"
import json, sys
o = json.loads(open(sys.argv[1]).read())
r = o["reaction_ms"]
assert (r["changes"], r["already"], r["missed"], r["p50"], r["max"]) == (3, 1, 1, 0.0, 10.0), r
assert o["phases"]["DataLoading"]["accuracy_pct"] == 95.0 and o["phases"]["Unknown"]["accuracy_pct"] == 50.0, o
PY

# Bad input: exit 2 with a message naming the problem.
bad() {  # bad DESCRIPTION EXPECTED-MESSAGE ARGS...
  local what=$1
  bad_msg=$2
  shift 2
  python3 "$score" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  check "$what: exit 2 (got $rc) naming it ($(head -c 200 "$tmp/err"))" \
    "[[ $rc -eq 2 ]] && grep -qF \"\$bad_msg\" $tmp/err"
}
echo '{"t_ns": 1, "pid": 1, "phase": "Sleeping"}' > "$tmp/badphase.jsonl"
echo 'not json' > "$tmp/garbage.jsonl"
echo '{"t_ns": -5, "pid": 1, "phase": "Unknown"}' > "$tmp/negative.jsonl"
: > "$tmp/empty.jsonl"
bad "unknown phase" "unknown phase 'Sleeping'" "$tmp/truth.jsonl" "$tmp/badphase.jsonl"
bad "a line that is not JSON" "garbage.jsonl:1: not a phase line" "$tmp/garbage.jsonl" "$tmp/phases.jsonl"
bad "a negative stamp" "must be positive integers" "$tmp/negative.jsonl" "$tmp/phases.jsonl"
bad "an empty truth log" "no process with at least two lines" "$tmp/empty.jsonl" "$tmp/phases.jsonl"
bad "a missing file" "No such file" "$tmp/nothere.jsonl" "$tmp/phases.jsonl"
bad "an unknown --require key" "unknown key 'p95_ms'" "$tmp/truth.jsonl" "$tmp/phases.jsonl" --require p95_ms=3
bad "an accuracy above 1" "a fraction between 0 and 1" "$tmp/truth.jsonl" "$tmp/phases.jsonl" --require accuracy=95
bad "an unknown role" "unknown role 'gpu'" "$tmp/truth.jsonl" "$tmp/phases.jsonl" --require gpu.accuracy=0.5
bad "a boosted share above 1" "a fraction between 0 and 1" "$tmp/truth.jsonl" "$tmp/phases.jsonl" --require helper.boosted=5
echo '{"t_ns": 1, "pid": 1, "tid": 2, "phase": "Unknown", "role": "janitor"}' > "$tmp/badrole.jsonl"
printf '%s\n' '{"t_ns": 1, "pid": 1, "tid": 3, "phase": "Unknown"}' \
  '{"t_ns": 2, "pid": 2, "tid": 3, "phase": "Unknown"}' > "$tmp/twopids.jsonl"
bad "an unknown thread role in the truth" "unknown role 'janitor'" "$tmp/badrole.jsonl" "$tmp/phases.jsonl" --threads
bad "a thread under two pids" "thread 3 also appears under pid 1" "$tmp/truth.jsonl" "$tmp/twopids.jsonl" --threads
summary
