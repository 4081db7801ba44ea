#!/usr/bin/env bash
# tests/vm/build-kernel-6.12.sh: builds a Linux 6.12 kernel with sched_ext for the VM tests, the
# oldest kernel zernel's scheduler supports (bpf/zernel.bpf.c, "KERNEL COMPATIBILITY"). Debian
# ships 6.12 (bookworm-security) with CONFIG_SCHED_CLASS_EXT unset, and the recipe's fetched
# kernel is 7.3, which differs where it matters: 7.3 moves a task off a CPU that a real-time task
# took by itself, 6.12 leaves it on that CPU's local queue unless the scheduler implements
# ops.cpu_release. So this builds Debian's linux-source-6.12 with a small configuration
# (tinyconfig plus what the guest and the scheduler need, everything built in: no modules), about
# 15-20 minutes on 2 cores, too long for CI; run it by hand, then point the VM at it:
#
#   tests/vm/build-kernel-6.12.sh                  # -> build/_deps/kernel-6.12
#   ZERNEL_VM_KERNEL=build/_deps/kernel-6.12 tests/vm/run-in-vm.sh -- ...
#
# Env: ZERNEL_BUILD_DIR (<repo>/build), ZERNEL_K612_VERSION (the package version; default the
# newest apt knows), ZERNEL_K612_WORK (scratch directory, <build>/_deps/kernel-6.12-work: the
# source and the objects, about 3 GB; kept, so that a second run only relinks).
set -euo pipefail
here=$(dirname "$(realpath "$0")")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$here/../../build}")
out=$build/_deps/kernel-6.12
work=$(realpath -m "${ZERNEL_K612_WORK:-$build/_deps/kernel-6.12-work}")
die() { echo "build-kernel-6.12: $*" >&2; exit 1; }
for t in make gcc flex bison bc pahole; do
  command -v "$t" > /dev/null || die "$t not found (apt-get install flex bison bc dwarves build-essential)"
done
mkdir -p "$work"

# 1. Debian's source package (and its patches), unpacked once.
src=$work/src/usr/src/linux-source-6.12
if [ ! -f "$src/Makefile" ]; then
  ver=${ZERNEL_K612_VERSION:-$(apt-cache policy linux-source-6.12 | sed -n 's/^ *Candidate: //p')}
  if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
    die "apt knows no linux-source-6.12 (bookworm-security)"
  fi
  (cd "$work" && apt-get download "linux-source-6.12=$ver") || die "downloading linux-source-6.12 $ver"
  dpkg-deb -x "$work"/linux-source-6.12_*.deb "$work/src"
  tar -C "$work/src/usr/src" -xf "$src.tar.xz"
  rm -f "$work"/linux-source-6.12_*.deb "$src.tar.xz"
fi

# 2. The configuration: tinyconfig, then what /init (tests/vm/guest-init.sh) mounts and uses,
#    the four serial ports run-in-vm.sh reads, ACPI for poweroff, cgroup v2 with the cpu and
#    cpuset controllers (cpu.weight, cpu.max), BPF with BTF and sched_ext with its cgroup ops,
#    uprobes and tracefs for the probes, schedstats and delay accounting for the daemon, and
#    networking (libbpf probes for global data with a socket filter program: without NET it
#    decides the kernel has none, and no object with global variables loads; INET for the daemon's
#    HTTP port on 127.0.0.1), the magic SysRq key (vm.daemon_scx ends the scheduler with
#    sysrq-S, as an administrator would), and the function
#    tracer (fentry programs attach to a function's ftrace entry: the scx headers' probe on
#    bpf_scx_reg fails with EBUSY without it, and the scheduler does not attach).
obj=$work/obj
mkdir -p "$obj"
make -s -C "$src" O="$obj" tinyconfig > /dev/null
opts=(
  64BIT SMP PRINTK PRINTK_TIME TTY SERIAL_8250 SERIAL_8250_CONSOLE UNIX98_PTYS BLK_DEV_INITRD
  RD_GZIP BINFMT_ELF BINFMT_SCRIPT PROC_FS PROC_SYSCTL SYSCTL SYSFS DEVTMPFS TMPFS SHMEM
  MULTIUSER FUTEX EPOLL SIGNALFD TIMERFD EVENTFD POSIX_TIMERS AIO FILE_LOCKING ADVISE_SYSCALLS
  MEMBARRIER HIGH_RES_TIMERS NO_HZ_IDLE HZ_250 RSEQ KALLSYMS KALLSYMS_ALL ACPI PCI CGROUPS
  CGROUP_SCHED FAIR_GROUP_SCHED CFS_BANDWIDTH EXT_GROUP_SCHED CPUSETS PROC_PID_CPUSET
  CGROUP_CPUACCT BPF BPF_SYSCALL BPF_JIT BPF_JIT_ALWAYS_ON DEBUG_KERNEL DEBUG_INFO
  DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT DEBUG_INFO_BTF SCHED_CLASS_EXT DEBUG_FS DEBUG_FS_ALLOW_ALL
  PERF_EVENTS UPROBES UPROBE_EVENTS BPF_EVENTS FTRACE SCHED_DEBUG SCHEDSTATS TASK_DELAY_ACCT
  TASKSTATS IKCONFIG IKCONFIG_PROC NET UNIX INET MAGIC_SYSRQ FUNCTION_TRACER DYNAMIC_FTRACE
)
args=()
for o in "${opts[@]}"; do args+=(--enable "$o"); done
"$src/scripts/config" --file "$obj/.config" "${args[@]}" --set-val NR_CPUS 8 \
  --set-val SERIAL_8250_NR_UARTS 4 --set-val SERIAL_8250_RUNTIME_UARTS 4 \
  --disable DEBUG_INFO_REDUCED --disable DEBUG_INFO_SPLIT
make -s -C "$src" O="$obj" olddefconfig
for o in SCHED_CLASS_EXT EXT_GROUP_SCHED DEBUG_INFO_BTF CFS_BANDWIDTH UPROBE_EVENTS; do
  grep -q "^CONFIG_$o=y" "$obj/.config" || die "CONFIG_$o did not stay on (a dependency is missing)"
done

# 3. Build, and lay it out as run-in-vm.sh expects (vmlinuz, KVER, config).
make -C "$src" O="$obj" -j "$(nproc)" bzImage
mkdir -p "$out"
cp "$obj/arch/x86/boot/bzImage" "$out/vmlinuz"
cp "$obj/.config" "$out/config"
make -s -C "$src" O="$obj" kernelrelease > "$out/KVER"
echo "build-kernel-6.12: $out (Linux $(cat "$out/KVER"))"
