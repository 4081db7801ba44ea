#!/usr/bin/env bash
# /metrics against Prometheus itself: the daemon (observe, emulated GPU, a free port) is scraped,
# `promtool check metrics` accepts the exposition, and a real Prometheus server (loopback, a
# temporary config and TSDB, scraping every second) stores the daemon's series, which its query
# API returns. Skips cleanly when prometheus/promtool are not installed (scripts/setup.sh
# installs Debian's `prometheus` package).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
export ZERNEL_FAKE_GPU_SHM="/zernel-prom-test-$$"
daemon_pid=""
prom_pid=""
cleanup() {
  [[ -n $prom_pid ]] && kill -TERM "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

if ! command -v prometheus > /dev/null || ! command -v promtool > /dev/null; then
  skip "prometheus/promtool not installed (apt-get install prometheus)"
fi
emulated=()
[[ -f $BIN/../lib/fake/libnvidia-ml.so.1 ]] && emulated=(--emulated-gpu)

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200

[telemetry]
metrics_port = $port
push_interval_ms = 200
TOML

start_daemon --backend observe "${emulated[@]}" --control-socket "" || { summary; exit; }
sleep 1  # a few published snapshots, so the latency histogram has observations
check "a second scrape" "curl -sf http://127.0.0.1:$port/metrics > $tmp/metrics.txt"
promtool check metrics < "$tmp/metrics.txt" > "$tmp/promtool.txt" 2>&1
rc=$?
# Any complaint fails: promtool prints lint problems (a counter not named *_total, a missing
# HELP, ...) even where its exit status is 0.
check "promtool check metrics accepts the exposition without a complaint (rc $rc: $(tr '\n' ' ' < "$tmp/promtool.txt"))" \
  "[[ $rc -eq 0 && ! -s $tmp/promtool.txt ]]"
for series in 'zernel_scheduler_tasks{type="total"}' 'zernel_scheduler_decisions_total' \
  'zernel_scheduler_phase_time_pct{phase="gpu_compute"}' 'zernel_scheduler_backend_info{backend="observe"}' \
  'zernel_scheduler_decision_latency_seconds_bucket{le="+Inf"}' 'zernel_scheduler_last_decision_latency_seconds'; do
  check "metrics have $series" "grep -qF '$series ' $tmp/metrics.txt"
done
for family in zernel_scheduler_build_info zernel_scheduler_backend_ejections_total \
  zernel_scheduler_backend_restarts_total; do
  check "metrics have $family" "grep -q '^$family{' $tmp/metrics.txt"
done
if [[ ${#emulated[@]} -gt 0 ]]; then
  check "metrics have per-GPU series" "grep -q '^zernel_scheduler_gpu_tasks{gpu=\"0\",UUID=\"GPU-' $tmp/metrics.txt"
fi

# A real Prometheus server on a free loopback port, scraping the daemon every second.
prom_port=$(free_port)
cat > "$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: zernel-scheduler
    static_configs:
      - targets: ["127.0.0.1:$port"]
YAML
check "promtool check config accepts the scrape config" "promtool check config $tmp/prometheus.yml > /dev/null 2>&1"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" \
  > "$tmp/prometheus.log" 2>&1 &
prom_pid=$!
got=""
for _ in $(seq 60); do
  if curl -sf "http://127.0.0.1:$prom_port/api/v1/query?query=zernel_scheduler_tasks" > "$tmp/q.json" 2>/dev/null &&
     python3 - "$tmp/q.json" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "success"
types = {s["metric"].get("type") for s in r["data"]["result"]
         if s["metric"].get("job") == "zernel-scheduler"}
assert types == {"total", "ml"}, types
PY
  then
    got=yes
    break
  fi
  kill -0 "$prom_pid" 2>/dev/null || break  # the server died: its log says why
  sleep 0.5
done
check "Prometheus stored the daemon's zernel_scheduler_tasks series" "[[ -n '$got' ]]"
curl -sf "http://127.0.0.1:$prom_port/api/v1/query?query=up%7Bjob%3D%22zernel-scheduler%22%7D" > "$tmp/up.json"
check "the scrape target is up" "python3 -c 'import json,sys; r=json.load(open(\"$tmp/up.json\")); assert r[\"data\"][\"result\"][0][\"value\"][1] == \"1\"' 2>/dev/null"
curl -sf "http://127.0.0.1:$prom_port/api/v1/query?query=zernel_scheduler_decision_latency_seconds_count" > "$tmp/lat.json"
check "Prometheus has the decision latency histogram" "python3 -c 'import json,sys; r=json.load(open(\"$tmp/lat.json\")); assert r[\"data\"][\"result\"]' 2>/dev/null"

kill -TERM "$prom_pid" 2>/dev/null
wait "$prom_pid" 2>/dev/null
prom_pid=""
stop_daemon
check "daemon exits 0 on SIGTERM (got $daemon_rc)" "[[ $daemon_rc -eq 0 ]]"

if [[ $failures -ne 0 ]]; then
  echo "--- daemon log"; cat "$tmp/daemon.log"
  echo "--- prometheus log"; tail -20 "$tmp/prometheus.log"
fi
summary
