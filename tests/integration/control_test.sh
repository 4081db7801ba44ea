#!/usr/bin/env bash
# Run-time control: the daemon in observe mode with its control socket in a temp dir. Tenant
# add/list/assign/remove round trip, refused requests exit 1 with the reason, a non-root peer is
# refused by its credentials, SIGHUP applies a valid config and keeps the old one on an invalid
# one, and status --json / top --once show the tracked processes.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
chmod 755 "$tmp"
sock="$tmp/run/ctl.sock"
daemon_pid=""
sleeper=""
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  [[ -n $sleeper ]] && { kill -KILL "$sleeper"; wait "$sleeper"; } 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
Z() { "$BIN/zernel-scheduler" "$@"; }

[[ $(id -u) -eq 0 ]] || skip "needs root (the control socket accepts only uid 0)"

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 50
gpu_poll_interval_ms = 100

[telemetry]
metrics_port = $port

[multi_tenant]
runtime_state_file = "$tmp/lib/runtime-tenants.json"

[[tenants]]
id = "from-config"
gpus = 2
class = "training"
TOML

start_daemon --backend observe --control-socket "$sock"
check "socket created 0600" "[[ \$(stat -c %a $sock) == 600 ]]"
check "socket dir 0700 (root only)" "[[ \$(stat -c %a $tmp/run) == 700 ]]"

Z tenant list --socket "$sock" > "$tmp/list0.txt" 2>&1
check "config tenants loaded at start" "grep -q '^from-config' $tmp/list0.txt"

Z tenant add --id team-a --gpus 4 --class inference --cpu-weight 1.5 --socket "$sock" > "$tmp/add.txt" 2>&1
rc=$?
check "tenant add exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "tenant add reports" "grep -q 'added tenant team-a' $tmp/add.txt"
Z tenant list --socket "$sock" > "$tmp/list1.txt" 2>&1
check "tenant list shows team-a" "grep -qE '^team-a +4 +inference +1.50' $tmp/list1.txt"

Z tenant add --id bad --gpus 1 --class bogus --socket "$sock" > "$tmp/badclass.txt" 2>&1
rc=$?
check "bad class exits 1 (got $rc)" "[[ $rc -eq 1 ]]"
check "bad class lists the valid classes" "grep -q 'valid: training, inference, interactive, background' $tmp/badclass.txt"
Z tenant add --id big --gpus 5000 --class training --socket "$sock" > "$tmp/big.txt" 2>&1
rc=$?
check "out-of-range gpus exits 1 (got $rc)" "[[ $rc -eq 1 ]] && grep -q 'gpus' $tmp/big.txt"
Z tenant add --id x --socket "$sock" > /dev/null 2>&1
rc=$?
check "usage error exits 2 (got $rc)" "[[ $rc -eq 2 ]]"

sleep 300 &
sleeper=$!
Z tenant assign --pid $sleeper --tenant team-a --socket "$sock" > "$tmp/assign.txt" 2>&1
rc=$?
check "assign exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
Z tenant assign --pid $sleeper --tenant nobody-here --socket "$sock" > "$tmp/assign2.txt" 2>&1
rc=$?
check "assign to an unknown tenant exits 1 (got $rc)" "[[ $rc -eq 1 ]] && grep -q 'not registered' $tmp/assign2.txt"
Z tenant assign --pid 4194305 --tenant team-a --socket "$sock" > "$tmp/assign3.txt" 2>&1
rc=$?
check "assign of an out-of-range pid exits 1 (got $rc)" "[[ $rc -eq 1 ]] && grep -q '1 to 4194304' $tmp/assign3.txt"

Z status --json --socket "$sock" > "$tmp/status.json" 2>&1
python3 - "$tmp/status.json" "$sleeper" <<'PY' && pass || fail "status --json lists the assigned process with its tenant"
import json, sys
s = json.load(open(sys.argv[1]))
t = {x["pid"]: x for x in s["tasks"]}
pid = int(sys.argv[2])
assert pid in t, sorted(t)
assert t[pid]["tenant"] == "team-a", t[pid]
assert t[pid]["comm"] == "sleep", t[pid]
assert s["backend"] == "observe"
PY
Z status --socket "$sock" > "$tmp/status.txt" 2>&1
check "status table lists the process" "grep -qE '^ *$sleeper +sleep .* team-a' $tmp/status.txt"
Z top --once --socket "$sock" > "$tmp/top.txt" 2>&1
rc=$?
check "top --once exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "top --once shows the process and the timeline" "grep -qE '^ *$sleeper +sleep' $tmp/top.txt && grep -q TIMELINE $tmp/top.txt && ! grep -q $'\x1b' $tmp/top.txt"

# A non-root peer is refused by its credentials even when the modes let it connect.
chmod 755 "$tmp/run"
chmod 666 "$sock"
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/zernel-scheduler" tenant list --socket "$sock" > "$tmp/nonroot.txt" 2>&1
rc=$?
check "non-root exits 1 (got $rc)" "[[ $rc -eq 1 ]]"
check "non-root refusal names the uid" "grep -q 'uid 65534 is not root' $tmp/nonroot.txt"
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/zernel-scheduler" tenant add --id evil --gpus 1 --class training --socket "$sock" > /dev/null 2>&1
Z tenant list --socket "$sock" > "$tmp/list2.txt" 2>&1
check "non-root add changed nothing" "! grep -q '^evil' $tmp/list2.txt"

# Malformed and oversized raw requests get an error reply and change nothing.
python3 - "$sock" <<'PY' && pass || fail "raw malformed/oversized requests get error replies"
import json, socket, sys
def call(data):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(data)
    s.shutdown(socket.SHUT_WR); out = b""
    while True:
        b = s.recv(65536)
        if not b: break
        out += b
    return json.loads(out.decode())
r = call(b"not json\n"); assert r["ok"] is False and "not valid JSON" in r["error"], r
r = call(b'{"op":"tenant_add","id":"' + b"x" * 5000 + b'"}\n'); assert r["ok"] is False and "4096" in r["error"], r
r = call(b'{"op":"tenant_remove","id":"team-a","force":true}\n'); assert r["ok"] is False and "unknown field" in r["error"], r
r = call(b'{"op":"tenant_list"}'); assert r["ok"] is True and any(t["id"] == "team-a" for t in r["tenants"]), r
PY

Z tenant remove --id team-a --socket "$sock" > "$tmp/rm.txt" 2>&1
rc=$?
check "tenant remove exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
Z tenant remove --id team-a --socket "$sock" > "$tmp/rm2.txt" 2>&1
rc=$?
check "removing it again exits 1 (got $rc)" "[[ $rc -eq 1 ]] && grep -q 'not registered' $tmp/rm2.txt"
Z tenant list --socket "$sock" > "$tmp/list3.txt" 2>&1
check "team-a is gone" "! grep -q '^team-a' $tmp/list3.txt"

# SIGHUP: a valid new config adds its tenant.
cat >> "$tmp/config.toml" <<'TOML'

[[tenants]]
id = "from-reload"
gpus = 1
class = "background"
TOML
kill -HUP $daemon_pid
sleep 0.5
Z tenant list --socket "$sock" > "$tmp/list4.txt" 2>&1
check "SIGHUP with a valid config adds its tenant" "grep -qE '^from-reload +1 +background' $tmp/list4.txt"
check "daemon logged the reload" "grep -q 'reloaded $tmp/config.toml' $tmp/daemon.log"

# SIGHUP: an invalid config is refused, the old one kept.
cp "$tmp/config.toml" "$tmp/config.good"
printf '\n[[tenants]]\nid = "broken"\ngpus = -3\nclass = "training"\n' >> "$tmp/config.toml"
kill -HUP $daemon_pid
sleep 0.5
Z tenant list --socket "$sock" > "$tmp/list5.txt" 2>&1
check "invalid config keeps the old tenants" "grep -q '^from-reload' $tmp/list5.txt && ! grep -q '^broken' $tmp/list5.txt"
check "invalid config logs the error" "grep -q 'reload failed, keeping the running configuration' $tmp/daemon.log"
check "daemon still alive after the bad reload" "kill -0 $daemon_pid"

# A second daemon on the same (live) socket fails at start with a clear message.
port2=$(free_port)
sed "s/metrics_port = $port/metrics_port = $port2/" "$tmp/config.good" > "$tmp/config2.toml"
Z --config "$tmp/config2.toml" --backend observe --control-socket "$sock" > "$tmp/second.log" 2>&1
rc=$?
check "second daemon on a live socket exits 1 (got $rc)" "[[ $rc -eq 1 ]] && grep -q 'already listening' $tmp/second.log"

kill -TERM $daemon_pid
wait $daemon_pid
rc=$?
daemon_pid=""
check "daemon exits 0 on SIGTERM (got $rc)" "[[ $rc -eq 0 ]]"
check "socket removed at exit" "[[ ! -e $sock ]]"
Z tenant list --socket "$sock" > "$tmp/down.txt" 2>&1
rc=$?
check "no daemon: exit 1, cannot reach (got $rc)" "[[ $rc -eq 1 ]] && grep -q 'cannot reach the daemon at $sock' $tmp/down.txt"

if [[ $failures -ne 0 ]]; then
  echo "--- daemon log"; cat "$tmp/daemon.log"
fi
summary
