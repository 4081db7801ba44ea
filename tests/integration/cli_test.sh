#!/usr/bin/env bash
# Runs build/bin/zernel-scheduler as a user would and checks what it prints and its exit codes.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
BIN=${ZERNEL_BIN:-build/bin}/zernel-scheduler
trap 'rm -rf "$tmp"' EXIT

# expect CODE PATTERN -- CMD...: exit status CODE and combined output matching PATTERN (grep -E).
expect() {
  local code=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [[ $rc -ne $code ]]; then fail "$* -> exit $rc, wanted $code. Output: $out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then fail "$* -> output lacks /$pattern/: $out"; return; fi
  pass
}

# An empty variable means "not set": the default path is used.
export ZERNEL_SCHEDULER_CONFIG=""

expect 0 '^zernel-scheduler [0-9]+\.[0-9]+\.[0-9]+' -- "$BIN" --version
expect 0 'check-config' -- "$BIN" --help
expect 0 '--demo' -- "$BIN" --help
expect 2 'backend' -- "$BIN" --backend nonsense --demo
expect 2 'unknown-flag|not expected|extras' -- "$BIN" --unknown-flag
expect 1 'no such file' -- "$BIN" --config "$tmp/absent.toml" --dump-config

: > "$tmp/empty.toml"
# Daemon start-up failures are fatal, named, and leave nothing running: the userspace backend
# without CAP_SYS_NICE (as nobody when the test runs as root).
nobody=()
[[ $(id -u) -eq 0 ]] && nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
expect 1 'CAP_SYS_NICE' -- "${nobody[@]}" "$BIN" --config /dev/null --backend userspace

# --dump-config prints every section; dumping what was dumped gives the same text.
"$BIN" --config "$tmp/empty.toml" --dump-config > "$tmp/dump1.toml" || fail "dump-config of an empty file"
for section in general phase_detection numa multi_tenant telemetry; do
  grep -q "^\[$section\]" "$tmp/dump1.toml" && pass || fail "dump lacks [$section]"
done
grep -q '^phase_eval_interval_ms = 100$' "$tmp/dump1.toml" && pass || fail "dump lacks default interval"
"$BIN" --config "$tmp/dump1.toml" --dump-config > "$tmp/dump2.toml" || fail "dump of dump"
cmp -s "$tmp/dump1.toml" "$tmp/dump2.toml" && pass || fail "dump -> load -> dump differs"
expect 0 'OK' -- "$BIN" check-config "$tmp/dump1.toml"

# The environment variable names the config; --config wins over it.
printf '[general]\nphase_eval_interval_ms = 250\ngpu_poll_interval_ms = 500\n' > "$tmp/env.toml"
expect 0 'phase_eval_interval_ms = 250' -- env ZERNEL_SCHEDULER_CONFIG="$tmp/env.toml" "$BIN" --dump-config
expect 0 'phase_eval_interval_ms = 100' -- env ZERNEL_SCHEDULER_CONFIG="$tmp/env.toml" "$BIN" --config "$tmp/empty.toml" --dump-config

# Bad configs: exit 1 and the message names the key.
check_bad() {
  local pattern=$1 body=$2
  printf '%b' "$body" > "$tmp/bad.toml"
  expect 1 "$pattern" -- "$BIN" check-config "$tmp/bad.toml"
}
check_bad 'phase_eval_interval_ms' '[general]\nphase_eval_interval_ms = 0\n'
check_bad 'io_wait_threshold' '[phase_detection]\nio_wait_threshold = 1.5\n'
check_bad 'gpu_active_threshold' '[phase_detection]\ngpu_active_threshold = 101\n'
check_bad 'gpu_idle_threshold' '[phase_detection]\ngpu_idle_threshold = 90\ngpu_active_threshold = 80\n'
check_bad 'max_tracked_tasks' '[general]\nmax_tracked_tasks = 0\n'
check_bad 'bogus' '[general]\nbogus = 1\n'
check_bad 'nonsense' '[nonsense]\nx = 1\n'
check_bad 'line 2' '[general]\nphase_eval_interval_ms = = 3\n'
check_bad 'enabled' '[numa]\nenabled = "yes"\n'
check_bad 'training, inference, interactive, background' '[[tenants]]\nid = "a"\ngpus = 1\nclass = "gold"\n'
check_bad 'a' '[[tenants]]\nid = "a"\ngpus = 1\nclass = "training"\n[[tenants]]\nid = "a"\ngpus = 2\nclass = "training"\n'
expect 1 'no such file' -- "$BIN" check-config "$tmp/absent.toml"

# The legacy default class "normal" loads with a warning.
printf '[multi_tenant]\nenabled = true\ndefault_priority_class = "normal"\n' > "$tmp/normal.toml"
expect 0 'warning.*normal' -- "$BIN" check-config "$tmp/normal.toml"

# The demo runs the real engine through DataLoading -> GpuCompute -> OptimizerStep.
"$BIN" --config "$tmp/empty.toml" --demo --phase-log "$tmp/phases.jsonl" > "$tmp/demo.txt" 2>&1 \
  || fail "demo exited non-zero: $(cat "$tmp/demo.txt")"
for phase in DataLoading GpuCompute OptimizerStep; do
  grep -q "$phase .*committed" "$tmp/demo.txt" && pass || fail "demo never committed $phase"
done
grep -q 'zernel_scheduler_decisions_total' "$tmp/demo.txt" && pass || fail "demo prints no metrics"
# build_info names the build in every mode, the demo's sample included (it printed
# version="",commit="" when only the daemon filled them in).
version=$("$BIN" --version | awk '{print $2}')
check "the demo's build_info carries version $version and a commit" \
  "grep -qE '^zernel_scheduler_build_info\\{version=\"$version\",commit=\"[^\"]+\"' $tmp/demo.txt"
python3 - "$tmp/phases.jsonl" <<'PY' && pass || fail "phase log is not the documented JSON lines"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) >= 3, lines
seen = []
for line in lines:
    o = json.loads(line)
    assert set(o) == {"t_ns", "pid", "phase"}, o
    assert isinstance(o["t_ns"], int) and o["t_ns"] > 0
    seen.append(o["phase"])
assert seen[:3] == ["DataLoading", "GpuCompute", "OptimizerStep"], seen
PY
expect 1 'phase log' -- "$BIN" --config "$tmp/empty.toml" --demo --phase-log /nonexistent-dir/x.jsonl

summary
