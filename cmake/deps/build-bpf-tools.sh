#!/usr/bin/env bash
# build-bpf-tools.sh STEP KERNEL_DIR OUT
# Builds the BPF toolchain from the test kernel's own source (fetch-kernel.sh's KERNEL_DIR, with
# linux-source-X.Y in debs/), so that libbpf, bpftool and vmlinux.h all match the kernel the VM
# boots: bookworm's libbpf 1.4.6 cannot compile the struct_ops skeletons of backports' bpftool 7.5.
# One STEP per call (CMake runs each as its own cached step and writes nothing else):
#   libbpf     OUT/lib/libbpf.a (static, -fPIC), OUT/include/bpf/*.h, and the sched_ext headers
#              of tools/sched_ext/include as OUT/include/scx/*.h and OUT/include/bpf-compat/
#   bpftool    OUT/bin/bpftool (full build: skeletons, struct_ops, btf dump; no JIT disassembler,
#              links only libelf and zlib)
#   vmlinux.h  OUT/vmlinux.h from KERNEL_DIR/vmlinux's BTF, never the host's /sys/kernel/btf/vmlinux
#              (the host kernel has no sched_ext types)
# Each step ends by touching OUT/.STEP.stamp. Logs: OUT/STEP.log. Env: ZERNEL_DEPS_JOBS (2),
# ZERNEL_CLANG (clang-19).
set -euo pipefail
step=$1 k=$(realpath "$2") out=$(realpath -m "$3")
kver=$(cat "$k/KVER")
jobs=${ZERNEL_DEPS_JOBS:-2}
clang=${ZERNEL_CLANG:-clang-19}
mkdir -p "$out"
log=$out/$step.log

# run CMD...: runs a build command with its output in $log; on failure shows the log's tail.
run() {
  "$@" >> "$log" 2>&1 || { tail -40 "$log" >&2; echo "error: $step failed, see $log" >&2; exit 1; }
}

# unpack_source: sets $src to the kernel tree's parts that libbpf and bpftool need, unpacking them
# (once per kernel version) straight from the source .deb: ~10 s, nearly all xz decompression.
unpack_source() {
  local deb top
  deb=$(ls "$k"/debs/linux-source-*.deb)
  top=$(basename "$deb" | cut -d_ -f1)  # linux-source-X.Y
  src=$out/src/$top
  [ "$(cat "$out/src/KVER" 2>/dev/null)" = "$kver" ] && return 0
  rm -rf "$out/src" "$out/build"
  mkdir -p "$out/src"
  dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/$top.tar.xz" |
    tar -xJ -C "$out/src" "$top/tools" "$top/kernel/bpf" "$top/include/uapi" \
      "$top/arch/x86/include/uapi" "$top/scripts"
  echo "$kver" > "$out/src/KVER"
}

: > "$log"
case $step in
  libbpf)
    unpack_source
    rm -rf "${out:?}/include" "${out:?}/lib" "${out:?}/build/libbpf"
    mkdir -p "$out/build/libbpf" "$out/lib"
    run make -C "$src/tools/lib/bpf" -j"$jobs" OUTPUT="$out/build/libbpf/" \
      BUILD_STATIC_ONLY=1 EXTRA_CFLAGS='-g -O2 -fPIC' DESTDIR="$out" prefix= all install_headers
    cp "$out/build/libbpf/libbpf.a" "$out/lib/libbpf.a"
    cp -r "$src/tools/sched_ext/include/." "$out/include/"
    ;;
  bpftool)
    unpack_source
    rm -rf "$out/build/bpftool"
    mkdir -p "$out/build/bpftool" "$out/bin"
    # CLANG/VMLINUX_BTF: bpftool's own BPF programs (pid_iter, profiler) need clang-19 and BTF;
    # without VMLINUX_BTF its Makefile would take the host's. SKIP_*: no optional libraries
    # (JIT disassembler, signing), so the result does not depend on what else the host has.
    run make -C "$src/tools/bpf/bpftool" -j"$jobs" OUTPUT="$out/build/bpftool/" \
      CLANG="$clang" VMLINUX_BTF="$k/vmlinux" EXTRA_CFLAGS='-g -O2' \
      SKIP_LLVM=1 SKIP_LIBBFD=1 SKIP_CRYPTO=1
    cp "$out/build/bpftool/bpftool" "$out/bin/bpftool"
    "$out/bin/bpftool" version >> "$log"
    ;;
  vmlinux.h)
    "$out/bin/bpftool" btf dump file "$k/vmlinux" format c > "$out/vmlinux.h.tmp"
    grep -q 'struct sched_ext_ops {' "$out/vmlinux.h.tmp" ||
      { echo "error: $k/vmlinux has no sched_ext types" >&2; exit 1; }
    mv "$out/vmlinux.h.tmp" "$out/vmlinux.h"
    ;;
  *) echo "usage: build-bpf-tools.sh libbpf|bpftool|vmlinux.h KERNEL_DIR OUT" >&2; exit 2 ;;
esac
echo "$kver" > "$out/KVER"
touch "$out/.$step.stamp"
echo "build-bpf-tools: $step done for $kver"
