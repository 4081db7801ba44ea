#!/usr/bin/env bash
# run-in-vm.sh [--add PATH]... -- COMMAND [ARG]...
# Runs COMMAND as root in a throw-away VM: the sched_ext test kernel under QEMU 10 (TCG; /dev/kvm
# here is PVM and cannot run a stock kernel), both fetched into the build tree by the `vm-deps`
# target (cmake/Bpf.cmake). Prints COMMAND's stdout and stderr and exits with its exit status.
#
# The guest is a busybox initramfs holding the build's bin/* (with every shared library ldd names
# and the dynamic loader, at the same paths as on the host), each --add PATH (a file or directory,
# same path; libraries of executables too), the kernel's config as /boot/config-KVER (libbpf
# reads __kconfig from it) and the guest scripts' helpers as /zernel/guest-lib.sh (guest-lib.sh).
# proc, sys, dev (+pts, shm), debugfs, tracefs, cgroup2 and bpffs are mounted, / (so /tmp) is a
# tmpfs; build/bin leads PATH. The initramfs is cached by content hash in _deps/vm/.
#
# Exit: COMMAND's status; 124 on timeout; 125 when the harness itself fails (missing kernel or
# QEMU, guest setup failed or reported no status, a kernel oops, BUG, WARN or panic). Booted once
# more, at most once: a kernel panic before the guest ran COMMAND (a boot that failed), and a
# kernel `Oops: int3` (QEMU's multi-threaded TCG running a breakpoint the kernel's text patching
# had removed: docs/vm-testing.md); a second fault of either kind fails the run.
# Env: ZERNEL_BUILD_DIR (<repo>/build), ZERNEL_VM_TIMEOUT (seconds, 300), ZERNEL_VM_SMP (2),
#      ZERNEL_VM_MEM (MiB, 1024), ZERNEL_VM_APPEND (extra kernel arguments), ZERNEL_VM_VERBOSE=1
#      (timings and the guest console on stderr), ZERNEL_VM_KEEP=1 (keep the run directory),
#      ZERNEL_VM_QEMU_ARGS (extra QEMU options, split at blanks; e.g. "-icount shift=0,sleep=off"
#      makes guest time count instructions, for benchmarks on a busy host: bench/vm/run.sh),
#      ZERNEL_VM_KERNEL (a directory with vmlinuz, KVER and config: another kernel than the
#      fetched one, e.g. one built by tests/vm/build-kernel-6.12.sh).
# shellcheck disable=SC2034,SC2178,SC2004,SC2317 # namerefs (local -n map=...) and the trap
set -euo pipefail
here=$(dirname "$(realpath "$0")")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$here/../../build}")
deps=$build/_deps
timeout_s=${ZERNEL_VM_TIMEOUT:-300}
verbose=${ZERNEL_VM_VERBOSE:-0}

die() { echo "run-in-vm: $*" >&2; exit 125; }
usage() { sed -n '2p' "$0" | sed 's/^# /usage: /'; }
t0=$(date +%s.%N)
# say MSG: a progress line with the elapsed time, in verbose mode only.
say() {
  [ "$verbose" = 1 ] || return 0
  echo "run-in-vm: [$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')s] $*" >&2
}

adds=()
while [ $# -gt 0 ]; do
  case $1 in
    --add) [ $# -ge 2 ] || { usage >&2; exit 125; }
           [ -e "$2" ] || die "--add $2: no such file or directory"
           adds+=("$(realpath -s "$2")"); shift 2 ;;
    --) shift; break ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 125 ;;
  esac
done
[ $# -gt 0 ] || { usage >&2; exit 125; }

# Cached kernel and QEMU (cmake/Bpf.cmake's vm-deps target).
kdir=${ZERNEL_VM_KERNEL:-$deps/kernel/current}
qemu=$deps/qemu/bin/qemu-system-x86_64
hint="build it with: cmake --build $build --target vm-deps (needs -DZERNEL_BPF=ON)"
[ -f "$kdir/vmlinuz" ] || die "no test kernel in $kdir; $hint"
[ -x "$qemu" ] || die "no QEMU in $deps/qemu; $hint"
busybox=$(command -v busybox) || die "busybox not found: run scripts/setup.sh (busybox-static)"
kver=$(cat "$kdir/KVER")

# 1. What goes into the initramfs, as two maps DEST -> SOURCE: `base` (busybox, /init, the
#    kernel config, the build's bin/*: cached) and `extra` (the --add files: packed every run, so
#    that tests adding their own files do not churn the cache).
declare -A base extra
# add_libs MAP FILE: FILE's shared libraries and loader into MAP (ldd fails, harmlessly, on static
# binaries and scripts; a library it cannot find is an error).
add_libs() {
  local -n map=$1
  local out lib
  out=$(ldd "$2" 2>/dev/null) || return 0
  if grep -q 'not found' <<< "$out"; then die "$2: $(grep -m1 'not found' <<< "$out" | xargs)"; fi
  for lib in $(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' <<< "$out"); do
    map[$lib]=$lib
  done
}
# add MAP PATH: PATH (recursively if a directory) at the same path, and the libraries of its
# executables.
add() {
  local -n map=$1
  local f
  while IFS= read -r -d '' f; do
    map[$f]=$f
    if [ -x "$f" ]; then add_libs "$1" "$f"; fi
  done < <(find "$2" \( -type f -o -type l \) -print0)
}
base[/bin/busybox]=$busybox
add_libs base "$busybox"
base[/init]=$here/guest-init.sh
base[/zernel/guest-lib.sh]=$here/guest-lib.sh
base[/boot/config-$kver]=$kdir/config
if [ -d "$build/bin" ]; then add base "$build/bin"; fi
for a in "${adds[@]}"; do add extra "$a"; done

cache=$deps/vm
mkdir -p "$cache"
run=$(mktemp -d "$cache/run.XXXXXX")
cleanup() { if [ "${ZERNEL_VM_KEEP:-0}" = 1 ]; then echo "run-in-vm: kept $run" >&2; else rm -rf "$run"; fi; }
trap cleanup EXIT

# stage MAP DIR: copies MAP's files into DIR at their destinations. The build's binaries keep
# their symbols but lose their debug info (38 MB -> 6 MB for the kernel to unpack).
stage() {
  local -n map=$1
  local d
  for d in "${!map[@]}"; do
    mkdir -p "$2$(dirname "$d")"
    cp -L "${map[$d]}" "$2$d"
    case $d in "$build"/bin/*) strip --strip-debug "$2$d" 2> /dev/null || true ;; esac
  done
}
# cpio_gz DIR OUT: a gzip'd newc archive of DIR (parents before children, owned by root).
cpio_gz() {
  (cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -1 > "$2"
}

# 2. The base archive, cached by a hash of every destination, source content, and this script.
mapfile -t dests < <(printf '%s\n' "${!base[@]}" | LC_ALL=C sort)
srcs=(); for d in "${dests[@]}"; do srcs+=("${base[$d]}"); done
key=$({ printf '%s\n' "${dests[@]}"; sha256sum "$0" "${srcs[@]}" | cut -d' ' -f1; } |
  sha256sum | cut -c1-16)
initrd=$cache/initrd-$key.cpio.gz
if [ ! -f "$initrd" ]; then
  mkdir -p "$run/base"/{bin,dev,etc,proc,sys,tmp,run,root}
  stage base "$run/base"
  echo 'root:x:0:0:root:/root:/bin/sh' > "$run/base/etc/passwd"
  echo 'root:x:0:' > "$run/base/etc/group"
  cpio_gz "$run/base" "$run/base.cpio.gz"
  mv "$run/base.cpio.gz" "$initrd"  # atomic: a concurrent run may build the same one
  rm -rf "$run/base"
  # Keep the 4 newest.
  ls -t "$cache"/initrd-*.cpio.gz | tail -n +5 | xargs -r rm -f
  say "built initramfs $initrd ($(du -h "$initrd" | cut -f1), ${#dests[@]} files)"
fi

# 3. The --add files and the command, as a second archive appended to the base (the kernel
#    unpacks both, in order; later files replace earlier ones).
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
mkdir -p "$run/cmd/zernel"
stage extra "$run/cmd"
{
  echo '#!/bin/sh'
  echo "export HOME=/root PATH=$(q "$build/bin:/bin:/sbin:/usr/bin:/usr/sbin") ZERNEL_BUILD_DIR=$(q "$build")"
  printf 'exec'; for a in "$@"; do printf ' %s' "$(q "$a")"; done; echo
} > "$run/cmd/zernel/cmd"
chmod 755 "$run/cmd/zernel/cmd"
cpio_gz "$run/cmd" "$run/cmd.cpio.gz"
cat "$initrd" "$run/cmd.cpio.gz" > "$run/initrd"

# 4. Boot. -nodefaults: no VGA, NIC or option ROMs; four UARTs, see guest-init.sh.
read -ra qemu_extra <<< "${ZERNEL_VM_QEMU_ARGS:-}"
boot() {
  say "booting $kver, timeout ${timeout_s}s"
  : > "$run/console"; : > "$run/stdout"; : > "$run/stderr"; : > "$run/status"
  rc=0
  timeout -k 5 "$timeout_s" "$qemu" -nodefaults -no-user-config -display none -monitor none \
    -machine pc -accel tcg -cpu max -smp "${ZERNEL_VM_SMP:-2}" -m "${ZERNEL_VM_MEM:-1024}" \
    "${qemu_extra[@]}" \
    -no-reboot -serial "file:$run/console" -serial "file:$run/stdout" \
    -serial "file:$run/stderr" -serial "file:$run/status" \
    -kernel "$kdir/vmlinuz" -initrd "$run/initrd" \
    -append "console=ttyS0 loglevel=5 panic=-1 ${ZERNEL_VM_APPEND:-}" < /dev/null > "$run/qemu.log" 2>&1 ||
    rc=$?
  say "VM exited (qemu status $rc)"
}
boot
# At most one more boot, said on stderr with the first boot's fault, for faults of the emulated
# machine rather than of COMMAND:
# - a kernel panic before guest-init.sh ran the command: the machine failing to boot (seen once in
#   CI: a fault in enqueue_task_fair at 1.3 s, sched_ext not yet loaded);
# - a kernel `Oops: int3`: a CPU ran an int3 that the kernel's text patching (static keys, which
#   attaching and detaching a sched_ext scheduler flip) had already taken out again. Under QEMU's
#   multi-threaded TCG a vCPU can still run a block translated while the breakpoint was in place
#   (QEMU 7.2 about every second boot: /work/shared/vm-recipe.md; QEMU 10.0 rarely: CI met twice a
#   fault in vm.scx_sharing, ten attaches and detaches a run, with RIP one byte into a `jmp` of
#   __schedule, where a trapping int3 leaves it). A real CPU cannot.
# Any other oops, BUG, WARN or panic after the mark, or a second fault, fails the run below.
# What on the console is a kernel fault (loglevel=5 puts warnings and worse there).
fault_re='Oops|BUG:|WARNING: CPU|Kernel panic'
oops_lines() {  # the first fault's report: from its first line, 40 lines
  awk -v re="$fault_re" '$0 ~ re && !n { n = NR } n && NR < n + 40' "$run/console"
}
again=""
if [ "$rc" = 0 ] && [ ! -s "$run/status" ] && grep -qa 'Kernel panic' "$run/console" &&
   ! grep -qa 'zernel-init: running the command' "$run/console"; then
  again="the guest kernel panicked while booting, before the command ran"
elif [ "$rc" = 0 ] && grep -qa 'Oops: int3' "$run/console"; then
  again="the guest kernel trapped on a stale int3 of its own text patching (a QEMU TCG fault)"
fi
if [ -n "$again" ]; then
  echo "run-in-vm: $again; booting once more. The fault:" >&2
  oops_lines | head -n 12 >&2
  boot
fi

cat "$run/stdout"
cat "$run/stderr" >&2
if [ "$verbose" = 1 ]; then { echo "----- guest console -----"; cat "$run/console"; } >&2; fi
# The guest console's fault report (from its first line) if it has one, else its last lines.
console_tail() {
  if grep -qaE "$fault_re" "$run/console"; then
    echo "----- the guest console's fault report -----"; oops_lines
  fi
  echo "----- last lines of the guest console -----"; tail -n 30 "$run/console"
} >&2
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  console_tail
  echo "run-in-vm: timed out after ${timeout_s}s (ZERNEL_VM_TIMEOUT), QEMU killed: $*" >&2
  exit 124
fi
[ "$rc" = 0 ] || { cat "$run/qemu.log" >&2; die "QEMU failed (status $rc)"; }
status=$(tr -d '\r\n' < "$run/status")
case $status in
  init:*) console_tail; die "guest setup failed: $status" ;;
  ''|*[!0-9]*) console_tail; die "the guest reported no exit status: $*" ;;
esac
# Any oops, BUG, WARN or panic fails the run.
if grep -qaE "$fault_re" "$run/console"; then
  echo "----- guest console -----" >&2; cat "$run/console" >&2
  die "the guest kernel reported an oops, BUG, WARN or panic (command status $status): $*"
fi
exit "$status"
