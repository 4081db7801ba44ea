#!/usr/bin/env bash
# Issue 11, everything but the HTTP front (http_abuse_test.sh): the control socket cannot be
# locked by idle or refused clients; `tenant assign` refuses init, kernel threads, the daemon and
# protected system daemons; files the daemon reads or writes as root (config, journals) are
# regular, root-owned, not writable by others, bounded, and a FIFO, a symlink or a forged journal
# at their paths can neither hang nor steer it; a half-written config is not applied on SIGHUP;
# two daemons share kernel.task_delayacct. After each attack the daemon answers scrapes within
# 1 s, keeps ticking, stays under a memory bound and exits on SIGTERM within 2 s.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hardening_lib.sh"
pids=()
acct_file=/proc/sys/kernel/task_delayacct
acct_before=$(cat $acct_file 2>/dev/null || echo "")
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [[ -n $acct_before && -w $acct_file ]] && echo "$acct_before" > $acct_file
  [[ -n ${KEEP:-} ]] || rm -rf "$tmp"
}
trap cleanup EXIT
[[ $(id -u) -eq 0 ]] || skip "needs root (owner checks, setpriv, delay accounting)"
command -v curl > /dev/null || skip "curl is not installed"
export ZERNEL_DELAYACCT_HOLDERS="$tmp/run/delayacct.holders"
mkdir -p -m 0700 "$tmp/run"
port=$(free_port)
write_config "$tmp/config.toml" '
[[tenants]]
id = "t"
gpus = 1'
Z() { "$BIN/zernel-scheduler" "$@"; }

# ---- the control socket cannot be locked ----
start_observer "$tmp/d1.log" || fail "daemon did not start: $(tail -3 "$tmp/d1.log")"
chmod 755 "$tmp" "$tmp/run"  # the socket's modes widened: uid 65534 can connect
chmod 666 "$sock"
python3 - "$sock" > "$tmp/lock.txt" 2>&1 <<'PY' &
import os, socket, sys, time
held = []
for i in range(40):   # 40 idle root clients: more than the 32 slots
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)
pid = os.fork()
if pid == 0:           # 40 clients as uid 65534, also idle
    os.setgid(65534); os.setuid(65534)
    for i in range(40):
        try:
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)
        except OSError:
            pass
    time.sleep(8); os._exit(0)
time.sleep(8)
closed = 0
for s in held:
    s.setblocking(False)
    try:
        if s.recv(1) == b"": closed += 1
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print("root idle clients closed by the daemon:", closed, "of", len(held))
os.waitpid(pid, 0)
PY
locker=$!
pids+=("$locker")
sleep 1
t0=$(date +%s%N)
Z tenant list --socket "$sock" > "$tmp/list.txt" 2>&1
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "root gets a slot while 40 root and 40 refused clients sit idle (rc $rc, ${ms} ms)" \
  "[[ $rc -eq 0 ]] && (( ms < 1000 ))"
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/zernel-scheduler" tenant list \
  --socket "$sock" > "$tmp/nobody.txt" 2>&1
check "a refused peer gets its answer at once" "grep -q 'uid 65534 is not root' $tmp/nobody.txt"
wait "$locker"
cat "$tmp/lock.txt"
check "idle clients are closed on their own within 8 s" \
  "grep -qE 'closed by the daemon: (3[2-9]|40) of 40' $tmp/lock.txt"
chmod 700 "$tmp" "$tmp/run"
still_healthy "control socket lock"

# ---- tenant assign refuses what must never be a tenant's ----
python3 -c 'import ctypes, time; ctypes.CDLL(None).prctl(15, b"sshd", 0, 0, 0); time.sleep(60)' &
sshd_like=$!
pids+=("$sshd_like")
for _ in $(seq 100); do grep -qx sshd "/proc/$sshd_like/comm" 2>/dev/null && break; sleep 0.05; done
for target in "1:init" "2:kernel thread" "$daemon_pid:daemon itself" "$sshd_like:protected system process"; do
  pid=${target%%:*}
  why=${target#*:}
  Z tenant assign --pid "$pid" --tenant t --socket "$sock" > "$tmp/assign.txt" 2>&1
  rc=$?
  check "tenant assign of pid $pid is refused: $why (rc $rc: $(head -c 200 "$tmp/assign.txt"))" \
    "[[ $rc -ne 0 ]] && grep -q '$why' $tmp/assign.txt"
done
sleep 60 &
ordinary=$!
pids+=("$ordinary")
Z tenant assign --pid "$ordinary" --tenant t --socket "$sock" > "$tmp/assign.txt" 2>&1
check "an ordinary process is still assigned" "[[ \$? -eq 0 ]]"

# ---- a FIFO, then a half-written file, at the config path on SIGHUP ----
mv "$tmp/config.toml" "$tmp/config.good"
mkfifo -m 0600 "$tmp/config.toml"
kill -HUP "$daemon_pid"
sleep 0.5
check "SIGHUP with a FIFO as config: refused, not blocked" "grep -q 'FIFO, not a regular file' $tmp/d1.log"
still_healthy "FIFO config"
rm -f "$tmp/config.toml"
# A writer that saves in place in two parts 150 ms apart (a slow disk, a big file): the first
# part parses on its own. The daemon waits until the file has been left alone for 200 ms.
python3 - "$tmp/config.toml" "$port" <<'PY' &
import sys, time
first = f"""[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200
[telemetry]
metrics_port = {sys.argv[2]}
push_interval_ms = 200
[[tenants]]
id = "t"
gpus = 1
"""
with open(sys.argv[1], "w") as f:
    f.write(first); f.flush()
    time.sleep(0.15)
    f.write('[[tenants]]\nid = "second"\ngpus = 1\n')
PY
writer=$!
for _ in $(seq 100); do [[ -s $tmp/config.toml ]] && break; sleep 0.01; done
kill -HUP "$daemon_pid"  # in the middle of the save
wait "$writer"
sleep 1.5
Z tenant list --socket "$sock" > "$tmp/list.txt" 2>&1
check "a config saved in place in two parts is applied whole (both tenants)" \
  "grep -q '^second' $tmp/list.txt"
chmod 0666 "$tmp/config.toml"
kill -HUP "$daemon_pid"
sleep 0.5
check "SIGHUP with a world-writable config: refused with the reason" \
  "grep -q 'writable by others (mode 0666); refused' $tmp/d1.log"
chmod 0644 "$tmp/config.toml"
still_healthy "config attacks"
stop_within_2s "config attacks"

# ---- files at start: world-writable config, FIFO or /dev/zero link as journal ----
chmod 0666 "$tmp/config.toml"
timeout 5 "$BIN/zernel-scheduler" --config "$tmp/config.toml" --backend observe \
  --control-socket "$sock" > "$tmp/ww.log" 2>&1
rc=$?
check "a world-writable config stops the start with the reason (rc $rc)" \
  "[[ $rc -eq 1 ]] && grep -q 'writable by others' $tmp/ww.log"
chmod 0644 "$tmp/config.toml"
mkfifo -m 0600 "$ZERNEL_SETTINGS_JOURNAL"
t0=$(date +%s%N)
timeout 10 "$BIN/zernel-scheduler" --config "$tmp/config.toml" --backend observe \
  --control-socket "$sock" > "$tmp/fifo.log" 2>&1
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "a FIFO as settings journal: the start stops at once with the reason (rc $rc, ${ms} ms)" \
  "[[ $rc -eq 1 ]] && (( ms < 3000 )) && grep -q 'FIFO, not a regular file' $tmp/fifo.log"
rm -f "$ZERNEL_SETTINGS_JOURNAL"
ln -s /dev/zero "$ZERNEL_SETTINGS_JOURNAL"
timeout 10 "$BIN/zernel-scheduler" --config "$tmp/config.toml" --backend observe \
  --control-socket "$sock" > "$tmp/zero.log" 2>&1
rc=$?
check "a settings journal linked to /dev/zero is refused, not read (rc $rc)" \
  "[[ $rc -eq 1 ]] && grep -q 'symbolic link' $tmp/zero.log"
rm -f "$ZERNEL_SETTINGS_JOURNAL"

# ---- a forged userspace journal: owned by nobody, mode 0666, naming a process ----
sleep 60 &
victim=$!
pids+=("$victim")
start=$(awk '{ print $22 }' "/proc/$victim/stat")
printf 'zernel-userspace-journal 2\nowner 4000000 1\nprocess %s %s -15 0 -\nthread %s %s -15 0\nend\n' \
  "$victim" "$start" "$victim" "$start" > "$ZERNEL_USERSPACE_JOURNAL"
chown 65534:65534 "$ZERNEL_USERSPACE_JOURNAL"
chmod 0666 "$ZERNEL_USERSPACE_JOURNAL"
# ---- and a symlink planted at the settings journal's old temporary name ----
echo precious > "$tmp/victim.txt"
ln -s "$tmp/victim.txt" "$ZERNEL_SETTINGS_JOURNAL.tmp"
[[ -w $acct_file ]] && echo 0 > $acct_file
start_observer "$tmp/d2.log" || fail "daemon 2 did not start: $(tail -3 "$tmp/d2.log")"
check "the forged userspace journal is refused with the reason" \
  "grep -qE 'userspace journal: .*(owned by uid 65534|writable by others)' $tmp/d2.log"
check "the process it names keeps nice 0 and its CPUs (got $(ps -o ni= -p "$victim" | tr -d ' '))" \
  "[[ \$(ps -o ni= -p $victim | tr -d ' ') == 0 && \$(taskset -pc $victim | awk '{print \$NF}') == \$(taskset -pc \$\$ | awk '{print \$NF}') ]]"
check "the symlink's target is not clobbered" "[[ \$(cat $tmp/victim.txt) == precious ]]"

# ---- kernel.task_delayacct shared by two daemons with different journals ----
if [[ -w $acct_file ]]; then
  port_a=$port
  port=$(free_port)
  write_config "$tmp/config2.toml"
  mkdir -p -m 0700 "$tmp/run2"
  ZERNEL_SETTINGS_JOURNAL="$tmp/run2/settings.journal" ZERNEL_USERSPACE_JOURNAL="$tmp/run2/u.journal" \
    "$BIN/zernel-scheduler" --config "$tmp/config2.toml" --backend observe \
    --control-socket "$tmp/run2/ctl.sock" > "$tmp/d3.log" 2>&1 &
  second=$!
  pids+=("$second")
  for _ in $(seq 50); do curl -sf -m 1 "http://127.0.0.1:$port/metrics" > /dev/null && break; sleep 0.1; done
  sleep 0.5
  check "two daemons: delay accounting on" "[[ \$(cat $acct_file) == 1 ]]"
  port=$port_a
  stop_within_2s "first of two daemons"
  check "the first daemon to exit leaves delay accounting on for the other" \
    "[[ \$(cat $acct_file) == 1 ]] && grep -q 'left on: another zernel-scheduler' $tmp/d2.log"
  kill -TERM "$second"
  wait "$second"
  check "the last daemon to exit restores the original (0)" "[[ \$(cat $acct_file) == 0 ]]"
  check "no holders file is left" "[[ ! -e $ZERNEL_DELAYACCT_HOLDERS ]]"
else
  still_healthy "journal attacks"
  stop_within_2s "journal attacks"
  echo "note: $acct_file is not writable: the two-daemon delay accounting check is skipped"
fi
summary
