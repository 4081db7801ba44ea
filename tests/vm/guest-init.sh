#!/bin/busybox sh
# shellcheck shell=dash
# /init of run-in-vm.sh's initramfs (busybox). Sets up the file systems a sched_ext scheduler and
# BPF probes need, runs /zernel/cmd (the host's COMMAND, quoted by run-in-vm.sh) as root, reports
# its exit status and powers the VM off. Channels, all 8250 UARTs that the host maps to files:
#   ttyS0 console (kernel messages, this script's errors)   ttyS1 COMMAND's stdout
#   ttyS2 COMMAND's stderr                                  ttyS3 the exit status, one line
# A setup failure reports "init: ..." on ttyS3 instead of a number; the host treats it as its own
# error (exit 125), not as the command's.
/bin/busybox --install -s /bin
export PATH=/bin
status=/dev/ttyS3

# fail MSG: report a setup failure to the host and stop.
fail() {
  echo "init: $*" > "$status"
  echo "init: $*"
  poweroff -f
}

mount -t proc proc /proc || fail "mount /proc"
mount -t sysfs sysfs /sys || fail "mount /sys"
mount -t devtmpfs devtmpfs /dev || fail "mount /dev"
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts || fail "mount /dev/pts"
mount -t tmpfs tmpfs /dev/shm || fail "mount /dev/shm"
# / is the initramfs, already a writable tmpfs: /tmp and /run stay plain directories, so files
# run-in-vm.sh --add'ed under /tmp (or a build tree there) are not hidden by a mount.
chmod 1777 /tmp
mount -t debugfs debugfs /sys/kernel/debug || fail "mount debugfs"
mount -t tracefs tracefs /sys/kernel/tracing || fail "mount tracefs"
mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail "mount cgroup2"
mount -t bpf bpf /sys/fs/bpf || fail "mount bpffs"
# Both cgroup v2 controllers a scheduler test needs, for child cgroups.
echo "+cpu +cpuset" > /sys/fs/cgroup/cgroup.subtree_control || fail "enable cgroup cpu/cpuset"

# Raw output: no \n -> \r\n translation on the result channels.
for t in /dev/ttyS1 /dev/ttyS2 /dev/ttyS3; do
  stty -F "$t" raw -echo || fail "stty $t"
done

cd / || fail "cd /"
# The host's mark that the boot is over and the command runs (run-in-vm.sh: a kernel panic
# before it is a boot failure, booted once more).
echo "zernel-init: running the command" > /dev/console
/zernel/cmd < /dev/null > /dev/ttyS1 2> /dev/ttyS2
echo "$?" > "$status"
sync
poweroff -f
