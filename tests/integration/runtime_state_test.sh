#!/usr/bin/env bash
# Runtime tenants survive a restart: the daemon in observe mode with its control socket and its
# runtime state file ([multi_tenant] runtime_state_file) in a temp dir. A tenant added and a
# process assigned over the socket are there again after SIGTERM and a restart, and after
# SIGKILL and a restart (the file is written at each change, not at exit); a configuration
# tenant of the same id wins; a world-writable (forged) or truncated file is logged and ignored.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
chmod 755 "$tmp"
sock="$tmp/run/ctl.sock"
state="$tmp/lib/zernel/runtime-tenants.json"
daemon_pid=""
sleeper=""
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  [[ -n $sleeper ]] && { kill -KILL "$sleeper"; wait "$sleeper"; } 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
Z() { "$BIN/zernel-scheduler" "$@"; }
export ZERNEL_SETTINGS_JOURNAL="$tmp/run/settings.journal"
export ZERNEL_USERSPACE_JOURNAL="$tmp/run/userspace.journal"
export ZERNEL_DELAYACCT_HOLDERS="$tmp/run/delayacct.holders"

[[ $(id -u) -eq 0 ]] || skip "needs root (the control socket accepts only uid 0)"
mkdir -p -m 0700 "$tmp/run"

write_config() {  # write_config FILE [extra TOML]
  local port
  port=$(free_port)
  cat > "$1" <<TOML
[general]
phase_eval_interval_ms = 50
gpu_poll_interval_ms = 100

[telemetry]
metrics_port = $port

[multi_tenant]
runtime_state_file = "$state"

[[tenants]]
id = "from-config"
gpus = 2
class = "training"
${2:-}
TOML
}

start_observer() {  # start_observer LOG [CONFIG]: lib.sh's launch_daemon
  daemon_log=$1 daemon_config=${2:-$tmp/config.toml} launch_daemon --backend observe \
    --control-socket "$sock" || fail "daemon did not start and create its socket ($1)"
}

stop_daemon() {  # stop_daemon SIGNAL
  kill "-$1" "$daemon_pid"
  wait "$daemon_pid" 2>/dev/null
  daemon_pid=""
  rm -f "$sock"  # SIGKILL leaves it; the next daemon would replace a stale one anyway
}

list_has() {  # list_has FILE REGEX
  grep -qE "$2" "$1"
}

write_config "$tmp/config.toml"
start_observer "$tmp/d1.log"
check "first start: no state file yet, said so" "grep -q 'runtime tenants: no $state' $tmp/d1.log"
Z tenant add --id team-a --gpus 4 --class inference --cpu-weight 1.5 --socket "$sock" > /dev/null 2>&1
check "tenant add exits 0" "[[ $? -eq 0 ]]"
sleep 300 &
sleeper=$!
Z tenant assign --pid $sleeper --tenant team-a --socket "$sock" > /dev/null 2>&1
check "tenant assign exits 0" "[[ $? -eq 0 ]]"
check "state file written 0600" "[[ \$(stat -c %a $state) == 600 ]]"
check "state dir created 0700" "[[ \$(stat -c %a $tmp/lib/zernel) == 700 ]]"
check "state file names team-a and the pid" "grep -q '\"team-a\"' $state && grep -q '\"pid\":$sleeper' $state"

stop_daemon TERM
start_observer "$tmp/d2.log"
Z tenant list --socket "$sock" > "$tmp/list2.txt" 2>&1
check "after SIGTERM and a restart: team-a is listed" "list_has $tmp/list2.txt '^team-a +4 +inference +1.50'"
check "after SIGTERM and a restart: from-config is listed" "list_has $tmp/list2.txt '^from-config'"
check "restart logged what it restored" "grep -q 'restored 1 tenant(s) and 1 assigned process(es)' $tmp/d2.log"
Z status --json --socket "$sock" > "$tmp/status2.json" 2>&1
python3 - "$tmp/status2.json" "$sleeper" <<'PY' && pass || fail "after a restart the assigned process is in team-a again"
import json, sys
s = json.load(open(sys.argv[1]))
t = {x["pid"]: x for x in s["tasks"]}
pid = int(sys.argv[2])
assert pid in t and t[pid]["tenant"] == "team-a", t.get(pid)
PY

Z tenant add --id team-b --gpus 1 --class background --socket "$sock" > /dev/null 2>&1
stop_daemon KILL
start_observer "$tmp/d3.log"
Z tenant list --socket "$sock" > "$tmp/list3.txt" 2>&1
check "after SIGKILL and a restart: team-a and team-b are listed" \
  "list_has $tmp/list3.txt '^team-a +4' && list_has $tmp/list3.txt '^team-b +1 +background'"

# The process exits: it is not restored, and drops out of the file at the next change.
kill -KILL "$sleeper"; wait "$sleeper" 2>/dev/null; sleeper=""
Z tenant remove --id team-b --socket "$sock" > /dev/null 2>&1
check "a removed tenant and an exited process leave the file" \
  "! grep -q team-b $state && ! grep -q '\"pid\"' $state"
stop_daemon TERM

# The configuration wins over a saved tenant of the same id.
write_config "$tmp/config-wins.toml" '
[[tenants]]
id = "team-a"
gpus = 7
class = "training"'
start_observer "$tmp/d4.log" "$tmp/config-wins.toml"
Z tenant list --socket "$sock" > "$tmp/list4.txt" 2>&1
check "a config tenant of the same id wins" "list_has $tmp/list4.txt '^team-a +7 +training'"
check "and the daemon says so" "grep -q 'defined by the configuration, which wins' $tmp/d4.log"
stop_daemon TERM

# A forged (world-writable) file is refused, logged and ignored: the daemon starts.
cp "$state" "$tmp/state.good"
chmod 0666 "$state"
start_observer "$tmp/d5.log"
Z tenant list --socket "$sock" > "$tmp/list5.txt" 2>&1
check "world-writable state file: logged and ignored" \
  "grep -q 'writable by others' $tmp/d5.log && grep -q 'ignored' $tmp/d5.log && ! list_has $tmp/list5.txt '^team-a'"
check "world-writable state file: config tenants still there" "list_has $tmp/list5.txt '^from-config'"
stop_daemon TERM

# A truncated file (a crash cannot make one; a hand edit can): logged and ignored.
head -c 40 "$tmp/state.good" > "$state"
chmod 0600 "$state"
start_observer "$tmp/d6.log"
Z tenant list --socket "$sock" > "$tmp/list6.txt" 2>&1
check "truncated state file: logged and ignored" \
  "grep -q 'not valid JSON' $tmp/d6.log && ! list_has $tmp/list6.txt '^team-a'"
stop_daemon TERM

if [[ $failures -ne 0 ]]; then
  for f in "$tmp"/d*.log; do echo "--- $f"; cat "$f"; done
fi
summary
