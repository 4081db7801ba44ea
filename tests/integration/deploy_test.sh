#!/usr/bin/env bash
# deploy/: the example config passes check-config and is the defaults; its commented tenants are
# valid once uncommented; the systemd unit passes `systemd-analyze verify` (where systemd-analyze
# exists). The Kubernetes manifests: kustomize_test.sh; the installed unit: install_test.sh.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$tmp"' EXIT
Z="$BIN/zernel-scheduler"
D="$SRC/deploy"

check "check-config deploy/scheduler.toml" "\"$Z\" check-config \"$D/scheduler.toml\" > $tmp/check.txt 2>&1"
check "deploy/scheduler.toml gives no warnings" "! grep -q warning $tmp/check.txt"
: > "$tmp/empty.toml"
# The built-in defaults: without lib.sh's $ZERNEL_RUNTIME_STATE, which moves one of them.
env -u ZERNEL_RUNTIME_STATE "$Z" --config "$tmp/empty.toml" --dump-config > "$tmp/defaults.toml" 2>/dev/null
env -u ZERNEL_RUNTIME_STATE "$Z" --config "$D/scheduler.toml" --dump-config > "$tmp/example.toml" 2>/dev/null
check "deploy/scheduler.toml is the defaults" "cmp -s $tmp/defaults.toml $tmp/example.toml"
check "deploy/scheduler.toml has every key of --dump-config" \
  "diff <(grep -E '^[a-z_]+ = ' $tmp/defaults.toml) <(grep -E '^[a-z_]+ = ' \"$D/scheduler.toml\") > /dev/null"
sed -E 's/^# (\[\[tenants\]\]|id =|gpus =|class =|\[tenants\.match\]|cgroup =|comm =|uid =)/\1/' \
  "$D/scheduler.toml" | sed '/^\[multi_tenant\]/,/^$/ s/^enabled = false/enabled = true/' > "$tmp/tenants.toml"
check "the commented tenants are valid uncommented" \
  "\"$Z\" check-config $tmp/tenants.toml 2>&1 | grep -q 'OK (2 tenants'"

unit="$D/zernel-scheduler.service"
check "unit: Type=simple" "grep -qx 'Type=simple' $unit"
check "unit: ExecStart" "grep -qx 'ExecStart=/usr/local/bin/zernel-scheduler --config /etc/zernel/scheduler.toml' $unit"
check "unit: Restart=on-failure" "grep -qx 'Restart=on-failure' $unit"
check "unit: RuntimeDirectory=zernel" "grep -qx 'RuntimeDirectory=zernel' $unit"
check "unit: the journal in /run/zernel outlives a crash" "grep -qx 'RuntimeDirectoryPreserve=yes' $unit"
check "unit: /var/lib/zernel (runtime tenants) is writable under ProtectSystem=strict" "grep -qx 'StateDirectory=zernel' $unit"
check "unit: bounded capabilities" "grep -q '^CapabilityBoundingSet=CAP_SYS_NICE CAP_SYS_ADMIN CAP_BPF CAP_PERFMON' $unit"
if command -v systemd-analyze > /dev/null; then
  sed "s#/usr/local/bin/zernel-scheduler#$(realpath "$Z")#g; s#/etc/zernel/scheduler.toml#$(realpath "$D/scheduler.toml")#g" \
    "$unit" > "$tmp/zernel-scheduler.service"
  check "systemd-analyze verify the unit" "systemd-analyze verify $tmp/zernel-scheduler.service > $tmp/verify.txt 2>&1 && ! grep -q . $tmp/verify.txt"
else
  echo "SKIP: systemd-analyze is not installed"
fi

summary
