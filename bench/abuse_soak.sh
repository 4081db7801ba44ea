#!/usr/bin/env bash
# Mixed abuse for a long while (issue 11): the daemon (observe mode, 1,024 descriptors, the
# usual default limit) is attacked through HTTP by everything tests/integration/abuse.py knows at
# once (slowloris, idle connections, endless headers, malformed requests, pipelining, a
# connection flood), while idle clients pile up on its control socket, a root client lists
# tenants every second and SIGHUP reloads its config every 5 s. /metrics and /status are scraped
# every 200 ms throughout. Prints the scrape latencies and failures, the daemon's RSS and
# descriptors (start, peak, end), its ticks and its CPU time.
#   bench/abuse_soak.sh [SECONDS]      (default 600; root; uses build/bin or $ZERNEL_BIN)
set -uo pipefail
secs=${1:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${ZERNEL_BIN:-$root/build/bin}
# tmp, the daemon's paths under it, launch_daemon.
export ZERNEL_BIN=$bin
. "$root/tests/integration/lib.sh"
dpid=""
bg=()
cleanup() {
  [[ ${#bg[@]} -gt 0 ]] && kill "${bg[@]}" 2>/dev/null
  [[ -n $dpid ]] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200
[telemetry]
metrics_port = $port
push_interval_ms = 200
[[tenants]]
id = "soak"
gpus = 1
TOML
sock="$tmp/run/ctl.sock"
daemon_prefix="prlimit --nofile=1024:1024 --" launch_daemon --backend observe \
  --control-socket "$sock" || { echo "abuse_soak: the daemon did not start:"; cat "$tmp/daemon.log"; exit 1; }
dpid=$daemon_pid
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$dpid/stat"; }
fds() { ls "/proc/$dpid/fd" | wc -l; }
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$dpid/status"; }
rss0=$(rss); fd0=$(fds); cpu0=$(cpu_ticks)

# Control socket: 40 idle clients reconnecting as the daemon closes them; a root client every 1 s.
python3 - "$sock" "$secs" <<'PY' &
import socket, sys, time
end = time.monotonic() + float(sys.argv[2]); held = []
while time.monotonic() < end:
    held = [s for s in held if s.fileno() >= 0]
    while len(held) < 40:
        try:
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)
        except OSError:
            break
    time.sleep(1)
    for s in list(held):
        s.setblocking(False)
        try:
            if s.recv(1) == b"": s.close(); held.remove(s)
        except BlockingIOError:
            pass
        except OSError:
            s.close(); held.remove(s)
PY
bg+=($!)
(
  slow=0 failed=0 calls=0
  end=$((SECONDS + secs))
  while ((SECONDS < end)); do
    t0=$(date +%s%N)
    "$bin/zernel-scheduler" tenant list --socket "$sock" > /dev/null 2>&1 || failed=$((failed + 1))
    (( ($(date +%s%N) - t0) > 1000000000 )) && slow=$((slow + 1))
    calls=$((calls + 1))
    ((calls % 5 == 0)) && kill -HUP "$dpid"
    sleep 1
  done
  echo "control: $calls tenant list calls, $failed failed, $slow over 1 s; $((calls / 5)) SIGHUPs"
) > "$tmp/control.txt" &
bg+=($!)
peak_rss=$rss0 peak_fd=$fd0
(
  while kill -0 "$dpid" 2>/dev/null; do echo "$(rss) $(fds)"; sleep 1; done
) > "$tmp/samples.txt" &
bg+=($!)

python3 "$root/tests/integration/abuse.py" --port "$port" --pid "$dpid" --duration "$secs" \
  slowloris:8 idle:200 headers:2 malformed:1 pipeline:1 flood:600 > "$tmp/abuse.json"
wait "${bg[1]}"
kill "${bg[0]}" "${bg[2]}" 2>/dev/null
bg=()
while read -r r f; do
  ((r > peak_rss)) && peak_rss=$r
  ((f > peak_fd)) && peak_fd=$f
done < "$tmp/samples.txt"
hz=$(getconf CLK_TCK)
cpu1=$(cpu_ticks)
echo "duration: ${secs} s, daemon pid $dpid, descriptor limit 1024"
python3 -c "
import json; d = json.load(open('$tmp/abuse.json'))
print('scrapes: {probes} ({probe_failures} failed or over 1 s), p99 {probe_p99_s} s, max {probe_max_s} s'.format(**d))
print('failed scrapes by kind: ' + (', '.join('{}={}'.format(k[11:], v) for k, v in sorted(d.items()) if k.startswith('probe_fail_')) or 'none'))
print('ticks: {} in the run ({:.1f}/s); discovery errors {} -> {}'.format(d['ticks_end'] - d['ticks_start'], (d['ticks_end'] - d['ticks_start']) / $secs, d['discovery_errors_start'], d['discovery_errors_end']))
print('HTTP closed: ' + ', '.join('{}={:.0f}'.format(k[12:], v) for k, v in sorted(d.items()) if k.startswith('http_closed_')))
print('attack counters: ' + ', '.join('{}={}'.format(k, v) for k, v in sorted(d.items()) if not k.startswith(('http_', 'probe', 'ticks', 'discovery', 'rss'))))
"
cat "$tmp/control.txt"
echo "RSS kB: start $rss0, peak $peak_rss, end $(rss); descriptors: start $fd0, peak $peak_fd, end $(fds)"
echo "daemon CPU: $(( (cpu1 - cpu0) * 1000 / hz )) ms in ${secs} s ($(python3 -c "print(round(($cpu1 - $cpu0) / $hz / $secs * 100, 1))") % of one CPU)"
t0=$(date +%s%N)
kill -TERM "$dpid"
wait "$dpid"
rc=$?
echo "SIGTERM: exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
dpid=""
