#!/usr/bin/env bash
# The daemon's own CPU use with N tracked processes (default 1,000): N `sleep` processes are
# tracked through a tenant match rule, the daemon runs in observe mode for S seconds (default 30)
# at the default 100 ms tick, and its CPU time (utime + stime) is read from /proc.
#   bench/daemon_cpu.sh [N] [SECONDS]      (root; uses build/bin)
set -euo pipefail
n=${1:-1000}
secs=${2:-30}
bin=${ZERNEL_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}
# tmp, the daemon's paths under it, launch_daemon.
export ZERNEL_BIN=$bin
. "$(dirname "$0")/../tests/integration/lib.sh"
pids=()
cleanup() {
  [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null
  [[ -n ${dpid:-} ]] && kill "$dpid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$tmp/c.toml" <<TOML
[general]
max_tracked_tasks = 65536
[multi_tenant]
enabled = true
[telemetry]
metrics_port = $port
[[tenants]]
id = "bench"
gpus = 1
class = "background"
[tenants.match]
comm = ["zsleep"]
TOML
ln -s "$(command -v sleep)" "$tmp/zsleep"
for _ in $(seq "$n"); do "$tmp/zsleep" 3600 & pids+=($!); done
daemon_config=$tmp/c.toml daemon_log=$tmp/d.log launch_daemon --backend observe \
  --control-socket '' || { echo "daemon_cpu: the daemon did not start:"; cat "$tmp/d.log"; exit 1; }
dpid=$daemon_pid
sleep 2  # the first scans of the N processes
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$dpid/stat")
t0=$(date +%s.%N)
sleep "$secs"
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$dpid/stat")
t1=$(date +%s.%N)
tracked=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^zernel_scheduler_tasks\{type="total"\}/ {print $2}')
hz=$(getconf CLK_TCK)
python3 - "$u0" "$s0" "$u1" "$s1" "$t0" "$t1" "$hz" "$tracked" "$n" <<'PY'
import json, sys
u0, s0, u1, s1 = map(int, sys.argv[1:5]); t0, t1 = map(float, sys.argv[5:7]); hz = int(sys.argv[7])
cpu = ((u1 - u0) + (s1 - s0)) / hz
wall = t1 - t0
print(json.dumps({"processes": int(sys.argv[9]), "tracked": int(float(sys.argv[8] or 0)),
                  "wall_s": round(wall, 1), "cpu_s": round(cpu, 2),
                  "cpu_pct_of_one_core": round(100 * cpu / wall, 2),
                  "user_s": round((u1 - u0) / hz, 2), "sys_s": round((s1 - s0) / hz, 2)}))
PY
