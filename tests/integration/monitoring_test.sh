#!/usr/bin/env bash
# What deploy/monitoring ships, checked against the real thing:
#  1. the alert rules: `promtool check rules` clean and their unit tests
#     (zernel-alerts.test.yaml, `promtool test rules`) pass;
#  2. the Grafana dashboard: the JSON parses, and every PromQL query of its panels and template
#     variables returns data from a real Prometheus (Debian's) that scraped a running daemon
#     (observe backend, emulated GPU, two tenants, a zernel-workload job in one of them, so
#     that phase, tenant and GPU series exist). The panels that need DCGM exporter's series are
#     listed below (DCGM_PANELS); they are answered by a stand-in target that serves
#     DCGM_FI_DEV_GPU_UTIL with the labels dcgm-exporter gives the same GPUs (gpu, UUID,
#     pci_bus_id, Hostname, read from the emulated NVML), so their joins are checked too. The
#     panels on the sched_ext scheduler's counters (SCHED_EXT_PANELS) need that backend and
#     are checked only when the daemon runs it; those on the GPU sync probes (PROBE_PANELS)
#     only when the daemon loaded the probes (root, BTF).
# Skips (exit 77) without prometheus/promtool or the emulated GPU.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
MON=$SRC/deploy/monitoring
DASHBOARD=$MON/grafana/zernel-dashboard.json
export ZERNEL_FAKE_GPU_SHM="/zernel-monitoring-test-$$"
daemon_pid="" prom_pid="" dcgm_pid="" job_pid=""
cleanup() {
  for p in $job_pid $prom_pid $dcgm_pid; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

if ! command -v prometheus > /dev/null || ! command -v promtool > /dev/null; then
  skip "prometheus/promtool not installed (apt-get install prometheus)"
fi

# Panels whose queries need series from outside the daemon or a backend this run may not have,
# by title. Every other panel must return data.
DCGM_PANELS=("GPU utilisation by tenant (DCGM)" "GPU utilisation while the GPU's tasks load data (DCGM)")
SCHED_EXT_PANELS=("BPF scheduler events" "BPF CPU time by phase" "Starvation rescues and preemptions")
PROBE_PANELS=("GPU sync probe events")

# ---- 1. alert rules ----
promtool check rules "$MON/prometheus/zernel-alerts.yaml" > "$tmp/rules.txt" 2>&1
rc=$?
check "promtool check rules accepts zernel-alerts.yaml (rc $rc: $(tr '\n' ' ' < "$tmp/rules.txt"))" \
  "[[ $rc -eq 0 ]] && grep -q SUCCESS $tmp/rules.txt"
(cd "$MON/prometheus" && promtool test rules zernel-alerts.test.yaml) > "$tmp/rules-test.txt" 2>&1
rc=$?
check "promtool test rules zernel-alerts.test.yaml passes (rc $rc: $(tr '\n' ' ' < "$tmp/rules-test.txt"))" \
  "[[ $rc -eq 0 ]]"
# The tests can fail: the same tests against rules whose starvation threshold is raised must.
mkdir -p "$tmp/mutant"
sed 's/kind="starve_rescue"}\[5m\]) > 1/kind="starve_rescue"}[5m]) > 5/' \
  "$MON/prometheus/zernel-alerts.yaml" > "$tmp/mutant/zernel-alerts.yaml"
cp "$MON/prometheus/zernel-alerts.test.yaml" "$tmp/mutant/"
check "the rule tests fail for a changed rule" \
  "! cmp -s $MON/prometheus/zernel-alerts.yaml $tmp/mutant/zernel-alerts.yaml &&
   ! (cd $tmp/mutant && promtool test rules zernel-alerts.test.yaml > /dev/null 2>&1)"

# ---- 2. the dashboard ----
check "the dashboard JSON parses and every panel has queries" "python3 - '$DASHBOARD' <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
panels = [p for p in d['panels'] if p['type'] != 'row']
assert panels and all(p.get('targets') and all(t['expr'] for t in p['targets']) for p in panels)
assert len({p['id'] for p in d['panels']}) == len(d['panels']), 'panel ids repeat'
PY"
need_emulated_gpu

port=$(free_port)
cat > "$tmp/config.toml" <<TOML
[general]
phase_eval_interval_ms = 100
gpu_poll_interval_ms = 200

[telemetry]
metrics_port = $port
push_interval_ms = 200

[multi_tenant]
enabled = true

[[tenants]]
id = "team-a"
gpus = 1
[tenants.match]
comm = ["zernel-workloa*"]

[[tenants]]
id = "team-b"
gpus = 1
TOML
# Start-up loads the GPU sync probes (BPF) when it can: seconds on a loaded machine.
NODE_NAME=zernel-test-node daemon_wait=60 start_daemon --backend observe --emulated-gpu \
  --control-socket "" || { summary; exit; }
"$BIN/zernel-workload" --emulated-gpu --ranks 2 --workers 1 --steps 200 --data-ms 300 \
  --gpu-ms 400 --nccl-ms 200 --optimizer-ms 200 > "$tmp/workload.json" 2>&1 &
job_pid=$!
check "the daemon puts the job's processes on GPUs in tenant team-a" \
  "wait_for 20 'curl -sf http://127.0.0.1:$port/metrics | grep \"^zernel_scheduler_gpu_tenant_info{.*tenant=\\\"team-a\\\"\" > /dev/null'"
# The shares' values: team-a and team-b hold a GPU each in the same class (entitled 0.5 each);
# only team-a has processes, so it has all the tenants' CPU time (achieved 1, team-b 0).
ta='tenant="team-a",namespace="",pod=""' tb='tenant="team-b",namespace="",pod=""'
shares_ok() {
  curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/shares.txt" || return 1
  grep -qxF "zernel_scheduler_tenant_achieved_share{$ta} 1.000000" "$tmp/shares.txt" &&
    grep -qxF "zernel_scheduler_tenant_achieved_share{$tb} 0.000000" "$tmp/shares.txt"
}
check "achieved shares are 1 for the tenant with the job and 0 for the other" "wait_for 10 shares_ok"
shares_ok || grep '^zernel_scheduler_tenant' "$tmp/shares.txt"
check "entitled shares are 0.5 and 0.5" \
  "grep -qxF 'zernel_scheduler_tenant_entitled_share{$ta} 0.500000' $tmp/shares.txt &&
   grep -qxF 'zernel_scheduler_tenant_entitled_share{$tb} 0.500000' $tmp/shares.txt"
check "team-a's CPU time grows" \
  "awk '/^zernel_scheduler_tenant_cpu_seconds_total\{tenant=\"team-a\"/ {exit !(\$2 > 0)}' $tmp/shares.txt"
# The account is the job's real CPU time: its growth over 5 s against what /proc says the job's
# processes (ranks, DataLoader workers, launcher: comm zernel-workload) used meanwhile. The
# workers' figures come from the BPF task iterator where it loads (root), one read a tick.
if [[ $(id -u) -eq 0 ]]; then
  check "a tenant's processes' CPU time comes from the BPF task iterator" \
    "grep -q 'CPU time comes from a BPF task iterator' $tmp/daemon.log"
fi
job_cpu_s() {
  local f sum=0 hz
  hz=$(getconf CLK_TCK)
  for f in /proc/[0-9]*/stat; do
    read -r -a st < "$f" 2>/dev/null || continue
    [[ ${st[1]} == "(zernel-workload)" ]] && sum=$((sum + st[13] + st[14]))
  done
  awk -v t="$sum" -v hz="$hz" 'BEGIN { printf "%.3f", t / hz }'
}
team_a_cpu_s() {
  curl -sf "http://127.0.0.1:$port/metrics" |
    awk '/^zernel_scheduler_tenant_cpu_seconds_total\{tenant="team-a"/ { print $2 }'
}
a0=$(team_a_cpu_s) p0=$(job_cpu_s)
sleep 5
a1=$(team_a_cpu_s) p1=$(job_cpu_s)
echo "team-a CPU seconds $a0 -> $a1; the job's processes in /proc $p0 -> $p1"
check "team-a's CPU seconds grew as the job's processes' CPU time did (account $a0 -> $a1, /proc $p0 -> $p1)" \
  "awk -v a0='$a0' -v a1='$a1' -v p0='$p0' -v p1='$p1' 'BEGIN { a = a1 - a0; p = p1 - p0; d = a - p; if (d < 0) d = -d; exit !(a0 != \"\" && p > 1 && d <= 0.15 * p + 0.3) }'"
curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/metrics.txt"
# This scrape has every family the daemon fills here (tenants, GPUs, probes when loaded):
# promtool must have nothing to say about it.
promtool check metrics < "$tmp/metrics.txt" > "$tmp/promtool.txt" 2>&1
rc=$?
check "promtool check metrics is silent on a scrape with tenants and GPUs (rc $rc: $(tr '\n' ' ' < "$tmp/promtool.txt"))" \
  "[[ $rc -eq 0 && ! -s $tmp/promtool.txt ]]"
check "GPU series carry DCGM's labels (NVML UUID, pci_bus_id, Hostname from NODE_NAME)" \
  "grep -Eq '^zernel_scheduler_gpu_utilization_percent\\{gpu=\"0\",UUID=\"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\",pci_bus_id=\"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\\.[0-9A-F]\",Hostname=\"zernel-test-node\"\\} [0-9]+$' $tmp/metrics.txt"

# dcgm-exporter's stand-in: DCGM_FI_DEV_GPU_UTIL for each GPU the daemon reports, with the
# labels dcgm-exporter gives it (and some it adds that the dashboard must not join on).
mkdir -p "$tmp/dcgm"
python3 - "$tmp/metrics.txt" > "$tmp/dcgm/metrics" <<'PY'
import re, sys
print("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).")
print("# TYPE DCGM_FI_DEV_GPU_UTIL gauge")
for line in open(sys.argv[1]):
    m = re.match(r'zernel_scheduler_gpu_utilization_percent\{(.*)\} (\d+)$', line.strip())
    if m:
        gpu = re.search(r'gpu="(\d+)"', m.group(1)).group(1)
        print(f'DCGM_FI_DEV_GPU_UTIL{{{m.group(1)},device="nvidia{gpu}",modelName="emulated",DCGM_FI_DRIVER_VERSION="0"}} 55')
PY
check "the DCGM stand-in has a series per GPU" "grep -q '^DCGM_FI_DEV_GPU_UTIL{' $tmp/dcgm/metrics"
dcgm_port=$(free_port)
python3 -m http.server "$dcgm_port" --bind 127.0.0.1 --directory "$tmp/dcgm" > "$tmp/dcgm.log" 2>&1 &
dcgm_pid=$!

prom_port=$(free_port)
cat > "$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $MON/prometheus/zernel-alerts.yaml
scrape_configs:
  - job_name: zernel-scheduler
    static_configs:
      - targets: ["127.0.0.1:$port"]
  - job_name: dcgm-exporter
    static_configs:
      - targets: ["127.0.0.1:$dcgm_port"]
YAML
check "promtool check config accepts the scrape config with the alert rules" \
  "promtool check config $tmp/prometheus.yml > /dev/null 2>&1"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" > "$tmp/prometheus.log" 2>&1 &
prom_pid=$!
check "Prometheus is ready" "wait_for 30 'curl -sf http://127.0.0.1:$prom_port/-/ready > /dev/null'"
check "Prometheus loaded the alert rules" \
  "curl -sf http://127.0.0.1:$prom_port/api/v1/rules | grep ZernelSchedulerTenantBelowEntitledShare > /dev/null"
sleep 12  # more than the rate window below: every rate() has samples to work with

# Every query: template variables as Grafana would substitute them for this one daemon, then
# Prometheus's /api/v1/query (retried for up to 60 s in all: the achieved share needs two
# publishes with CPU time, and a GPU's tasks move between phases).
backend=$(sed -n 's/^zernel_scheduler_build_info{.*backend="\([^"]*\)".*/\1/p' "$tmp/metrics.txt")
probes=$(grep -c '^zernel_scheduler_probe_events_total{' "$tmp/metrics.txt")
python3 - "$DASHBOARD" "127.0.0.1:$prom_port" "127.0.0.1:$port" "$backend" "$probes" \
  "${#DCGM_PANELS[@]}" "${DCGM_PANELS[@]}" "${#SCHED_EXT_PANELS[@]}" "${SCHED_EXT_PANELS[@]}" \
  "${#PROBE_PANELS[@]}" "${PROBE_PANELS[@]}" > "$tmp/queries.txt" 2>&1 <<'PY'
import json, sys, time, urllib.parse, urllib.request
dash, prom, instance, backend, probes = sys.argv[1:6]
rest = sys.argv[6:]
lists = []
while rest:
    n = int(rest[0]); lists.append(rest[1:1 + n]); rest = rest[1 + n:]
dcgm, sched_ext, probe = (set(l) for l in lists)
d = json.load(open(dash))
titles = {p["title"] for p in d["panels"]}
for name in dcgm | sched_ext | probe:
    assert name in titles, f"listed panel {name!r} is not in the dashboard"
subst = {"$__rate_interval": "10s", "$__interval": "1s", "$instance": instance,
         "$Hostname": "zernel-test-node", "${datasource}": "prometheus"}
def expand(q):
    for k in sorted(subst, key=len, reverse=True):
        q = q.replace(k, subst[k])
    assert "$" not in q, f"unsubstituted variable in {q}"
    return q
def query(q):
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    r = json.load(urllib.request.urlopen(url, timeout=10))
    assert r["status"] == "success", r
    return r["data"]["result"]
# One deadline for all the retries: a broken query costs one try once it has passed.
deadline = time.time() + 60
def has_data(q):
    while True:
        res = query(q)
        if res or time.time() > deadline:
            return res
        time.sleep(1)
bad = 0
checked = 0
for v in d["templating"]["list"]:
    if v["type"] != "query":
        continue
    # label_values(METRIC, LABEL): the variable's values are LABEL's values of METRIC's series.
    q = v["query"]["query"]
    inner, label = q[len("label_values("):-1].rsplit(",", 1)
    res = has_data(expand(inner))
    values = {s["metric"].get(label.strip()) for s in res} - {None}
    print(("ok   " if values else "FAIL ") + f"variable {v['name']}: {sorted(values)}")
    bad += not values
for p in d["panels"]:
    if p["type"] == "row":
        continue
    t = p["title"]
    if t in sched_ext and backend != "sched_ext":
        print(f"skip {t}: needs the sched_ext backend (this run: {backend})")
        continue
    if t in probe and probes == "0":
        print(f"skip {t}: the daemon did not load the GPU sync probes")
        continue
    for target in p["targets"]:
        q = expand(target["expr"])
        res = has_data(q)
        checked += 1
        print(("ok   " if res else "FAIL ") + f"{t}: {q} -> {len(res)} series")
        bad += not res
        if t in dcgm and res:
            # The join kept the GPU's identity from both sides.
            for s in res:
                assert s["metric"].get("Hostname") == "zernel-test-node", s
print(f"{checked} queries checked")
sys.exit(1 if bad else 0)
PY
rc=$?
check "every dashboard query returns data ($(grep -c '^ok' "$tmp/queries.txt") ok, $(grep -c '^skip' "$tmp/queries.txt") skipped)" "[[ $rc -eq 0 ]]"
cat "$tmp/queries.txt"

kill -TERM "$job_pid" 2>/dev/null; wait "$job_pid" 2>/dev/null; job_pid=""
kill -TERM "$prom_pid" 2>/dev/null; wait "$prom_pid" 2>/dev/null; prom_pid=""
stop_daemon
check "daemon exits 0 on SIGTERM (got $daemon_rc)" "[[ $daemon_rc -eq 0 ]]"
if [[ $failures -ne 0 ]]; then
  echo "--- daemon log"; tail -30 "$tmp/daemon.log"
  echo "--- prometheus log"; tail -20 "$tmp/prometheus.log"
fi
summary
