#!/usr/bin/env bash
# fetch-kernel.sh DIR
# Fetches the test kernel for the VM tests and the BPF toolchain: the newest Debian
# trixie-backports cloud kernel (the first Debian suite whose kernel has CONFIG_SCHED_CLASS_EXT=y),
# resolved through the metapackage linux-image-cloud-amd64, and the matching linux-source-X.Y.
# No package is installed and no suite is added to the system (see private-apt.sh).
#
# Result, for KVER e.g. 7.3.4+deb13-cloud-amd64:
#   DIR/KVER/vmlinuz     bootable bzImage            DIR/KVER/config       the kernel's .config
#   DIR/KVER/vmlinux     uncompressed ELF with .BTF  DIR/KVER/KVER, PKGVER
#   DIR/KVER/debs/*.deb  the packages, incl. linux-source-X.Y
#   DIR/current -> KVER  and  DIR/.stamp (written last: the CMake output of this step)
# A rerun re-resolves the newest kernel but downloads nothing already in DIR/KVER/debs.
# Env: ZERNEL_KERNEL_SUITE (trixie-backports), ZERNEL_KERNEL_FLAVOUR (cloud-amd64).
set -euo pipefail
here=$(dirname "$(realpath "$0")")
# shellcheck source=SCRIPTDIR/private-apt.sh
. "$here/private-apt.sh"
out=$(realpath -m "$1")
suite=${ZERNEL_KERNEL_SUITE:-trixie-backports} flavour=${ZERNEL_KERNEL_FLAVOUR:-cloud-amd64}
papt_init "$out/apt" "$suite"

# 1. Metapackage -> versioned image package -> kernel release string and Debian version.
img=$(apt-cache "${APT[@]}" depends "linux-image-$flavour" |
  sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -1)
[ -n "$img" ] || { echo "error: cannot resolve linux-image-$flavour in $suite" >&2; exit 1; }
kver=${img#linux-image-}
pkgver=$(papt_version "$img")
srcpkg=linux-source-$(echo "$kver" | cut -d. -f1,2)
srcver=$(papt_version "$srcpkg")
# libbpf/bpftool/vmlinux.h must match the kernel: refuse a source of another version.
[ "$srcver" = "$pkgver" ] ||
  { echo "error: $srcpkg is '$srcver' but $img is $pkgver in $suite" >&2; exit 1; }
echo "fetch-kernel: $suite $img $pkgver (+ $srcpkg)"

# 2. Download (apt-get download skips files already present and valid). Since 7.x the image
#    package is a stub depending on linux-binary-KVER (vmlinuz) and linux-base-KVER (config).
k=$out/$kver
mkdir -p "$k/debs"
pkgs=("$img" "$srcpkg=$srcver")
for p in "linux-binary-$kver" "linux-base-$kver"; do
  [ -z "$(papt_version "$p")" ] || pkgs+=("$p=$pkgver")
done
(cd "$k/debs" && apt-get "${APT[@]}" download "${pkgs[@]}" > "$k/download.log" 2>&1) ||
  { cat "$k/download.log" >&2; echo "error: download of ${pkgs[*]} failed" >&2; exit 1; }

# 3. Unpack the kernel packages (not the 167 MB source: build-bpf-tools.sh streams it).
x=$k/x
rm -rf "$x"; mkdir -p "$x"
for d in "$k"/debs/*.deb; do
  case $d in */linux-source-*) ;; *) dpkg -x "$d" "$x" ;; esac
done
for f in vmlinuz config; do  # 7.x layout: /usr/lib/modules/KVER/; 6.x: /boot/
  for p in "$x/usr/lib/modules/$kver/$f" "$x/boot/$f-$kver"; do
    [ -f "$p" ] && cp "$p" "$k/$f"
  done
  [ -f "$k/$f" ] || { echo "error: no $f in ${pkgs[*]}" >&2; exit 1; }
done
rm -rf "$x"
grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$k/config" ||
  { echo "error: $kver has no CONFIG_SCHED_CLASS_EXT" >&2; exit 1; }

# 4. vmlinux (for BTF): Debian compresses the bzImage payload with zstd; find its magic and
#    decompress from there, keeping the first candidate that is an ELF with a .BTF section.
found=
for off in $(LC_ALL=C grep -aboP '\x28\xb5\x2f\xfd' "$k/vmlinuz" | cut -d: -f1); do
  tail -c +$((off + 1)) "$k/vmlinuz" | zstd -dcq > "$k/vmlinux" 2>/dev/null || true
  if readelf -S "$k/vmlinux" 2>/dev/null | grep '\.BTF' >/dev/null; then found=1; break; fi
done
[ -n "$found" ] || { rm -f "$k/vmlinux"; echo "error: no zstd vmlinux with BTF in vmlinuz" >&2; exit 1; }

echo "$kver" > "$k/KVER"; echo "$pkgver" > "$k/PKGVER"
ln -sfn "$kver" "$out/current"
# Older kernels are of no further use (the BPF tools follow `current`): 250 MB each.
for d in "$out"/*; do
  case ${d##*/} in apt|current|"$kver") ;; *) [ -L "$d" ] || rm -rf "$d" ;; esac
done
touch "$out/.stamp"
echo "fetch-kernel: $k ($(du -sh "$k" | cut -f1))"
