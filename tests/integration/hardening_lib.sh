# Sourced by the hardening tests (http_abuse_test.sh, hardening_test.sh) after lib.sh: one daemon
# in observe mode on a free port with a private control socket (lib.sh moves the journals under
# $tmp/run), and the checks every attack ends with (issue 11): scrapes answered within 1 s, the
# loop still ticking, RSS under a bound, and exit on SIGTERM within 2 s.
# Sets: port, daemon_pid, sock.
daemon_pid=""
sock="$tmp/run/ctl.sock"
RSS_LIMIT_KB=${RSS_LIMIT_KB:-65536}

write_config() {  # write_config FILE [extra TOML]
  cat > "$1" <<TOML
[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200

[telemetry]
metrics_port = $port
push_interval_ms = 200

[multi_tenant]
runtime_state_file = "$tmp/lib/runtime-tenants.json"
${2:-}
TOML
  chmod 0644 "$1"
}

# start_observer LOG [extra args]: lib.sh's launch_daemon in observe mode with $tmp/config.toml
# and the control socket $sock, logging to LOG.
start_observer() {
  local log=$1
  shift
  daemon_log=$log daemon_wait=5 launch_daemon --backend observe --control-socket "$sock" "$@"
}

ticks() {
  curl -sf -m 1 "http://127.0.0.1:$port/metrics" |
    awk '$1 == "zernel_scheduler_decision_latency_seconds_count" { print $2 }'
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$daemon_pid/status" 2>/dev/null || echo 0; }

# still_healthy WHAT: /metrics and /status within 1 s, ticks advance, RSS under the bound.
still_healthy() {
  local what=$1 t0 t1 rss
  check "$what: /metrics answers within 1 s" \
    "curl -sf -m 1 -o /dev/null http://127.0.0.1:$port/metrics"
  check "$what: /status answers within 1 s" \
    "curl -sf -m 1 -o /dev/null http://127.0.0.1:$port/status"
  t0=$(ticks)
  sleep 0.6
  t1=$(ticks)
  check "$what: the loop keeps ticking (${t0:-?} -> ${t1:-?})" \
    "[[ -n '$t0' && -n '$t1' ]] && (( ${t1%.*} > ${t0%.*} ))"
  rss=$(rss_kb)
  check "$what: RSS ${rss} kB under ${RSS_LIMIT_KB} kB" "(( rss < RSS_LIMIT_KB ))"
}

# stop_within_2s WHAT: SIGTERM, then the daemon must be gone within 2 s.
stop_within_2s() {
  local what=$1 gone=0
  kill -TERM "$daemon_pid" 2>/dev/null
  for _ in $(seq 20); do
    kill -0 "$daemon_pid" 2>/dev/null || { gone=1; break; }
    sleep 0.1
  done
  check "$what: exits on SIGTERM within 2 s" "(( gone == 1 ))"
  [[ $gone -eq 1 ]] || kill -KILL "$daemon_pid" 2>/dev/null
  wait "$daemon_pid" 2>/dev/null
  daemon_pid=""
}
