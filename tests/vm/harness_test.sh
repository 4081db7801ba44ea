#!/usr/bin/env bash
# Self-test of run-in-vm.sh, seven boots: the exit status, stdout and stderr kept apart, --add, the
# build's dynamically linked binaries on PATH, argument quoting; the timeout; a kernel that
# panics while booting (no init to run) and a kernel `Oops: int3` (here a forged console line)
# are booted once more, once, then reported as the harness's failure.
set -euo pipefail
run=$(dirname "$(realpath "$0")")/run-in-vm.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A harness error (here a missing --add file) is 125, before any boot.
rc=0; "$run" --add "$tmp/missing" -- true 2> "$tmp/err" || rc=$?
[ "$rc" = 125 ] || fail "missing --add file: status $rc, want 125"

echo "payload $$" > "$tmp/added.txt"
arg="it's a \"quoted\" \$arg"
rc=0
# shellcheck disable=SC2016 # $1 and $2 are the guest shell's
"$run" --add "$tmp/added.txt" -- sh -c '
  cat "$1"; printf "%s\n" "$2"; echo to-stderr >&2
  zernel-scheduler --help > /dev/null || exit 10
  exit 7' sh "$tmp/added.txt" "$arg" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 7 ] || { cat "$tmp/err" >&2; fail "exit status $rc, want 7"; }
[ "$(cat "$tmp/out")" = "payload $$"$'\n'"$arg" ] || fail "stdout: $(cat "$tmp/out")"
[ "$(cat "$tmp/err")" = "to-stderr" ] || fail "stderr: $(cat "$tmp/err")"
echo "ok: status, stdout, stderr, --add, PATH, quoting"

rc=0; ZERNEL_VM_TIMEOUT=20 "$run" -- sleep 600 > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" = 124 ] || fail "timeout: status $rc, want 124"
grep -q 'timed out after 20s' "$tmp/err" || fail "timeout message: $(cat "$tmp/err")"
echo "ok: timeout"

# rdinit and init pointing nowhere: the kernel panics before guest-init.sh, every boot.
rc=0
ZERNEL_VM_APPEND="rdinit=/nonexistent init=/nonexistent" "$run" -- true > /dev/null \
  2> "$tmp/err" || rc=$?
[ "$rc" = 125 ] || fail "panic while booting: status $rc, want 125"
grep -q 'panicked while booting, before the command ran; booting once more' "$tmp/err" ||
  fail "panic while booting: no second boot: $(cat "$tmp/err")"
grep -q 'reported no exit status' "$tmp/err" || fail "panic while booting: $(cat "$tmp/err")"
echo "ok: a panic while booting is booted once more, then reported"

# A kernel "Oops: int3" (QEMU TCG running a breakpoint of finished text patching) is booted once
# more; here every boot has one (a line at KERN_ERR on the console), so the second fails the run.
rc=0
"$run" -- sh -c 'echo "<3>Oops: int3: 0000 [#1] SMP (forged by harness_test.sh)" > /dev/kmsg
  echo ran' > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 125 ] || fail "int3 oops: status $rc, want 125"
[ "$(grep -c 'stale int3 of its own text patching' "$tmp/err")" = 1 ] ||
  fail "int3 oops: not booted exactly once more: $(cat "$tmp/err")"
grep -q 'forged by harness_test.sh' "$tmp/err" || fail "int3 oops: the fault is not shown"
grep -q 'reported an oops, BUG, WARN or panic' "$tmp/err" || fail "int3 oops: $(cat "$tmp/err")"
[ "$(cat "$tmp/out")" = ran ] || fail "int3 oops: stdout of the second boot: $(cat "$tmp/out")"
echo "ok: a kernel int3 oops is booted once more, once, then reported"
