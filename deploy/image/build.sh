#!/usr/bin/env bash
# Builds the zernel-scheduler OCI image from this project's own build, offline: no base image,
# no registry, no package download. The image holds the `cmake --install` tree (prefix /usr,
# stripped), the shared libraries the binary links (found with ldd, copied from this machine)
# and the directories the daemon uses; nothing else (no shell).
#
#   deploy/image/build.sh [--build-dir DIR] [--image NAME:TAG] [--oci-archive FILE]
#                         [--rootfs DIR] [--print-image]
#
#   --build-dir DIR     the configured and built CMake tree (default: build)
#   --image NAME:TAG    default: zernel/zernel-scheduler:<project version> (what the Kubernetes
#                       base names: deploy/kubernetes/base/kustomization.yaml)
#   --oci-archive FILE  also write the image as an OCI archive (podman load, ctr import,
#                       skopeo copy oci-archive:FILE ...)
#   --rootfs DIR        only assemble the image's tree in DIR (no buildah needed)
#   --print-image       print the image name and exit
#
# Needs buildah (Debian package) for the image; BUILDAH_ARGS passes options to every buildah
# call (tests/integration/image_test.sh uses a private store: --root, --runroot, vfs).
# The NVML library is not in the image: the NVIDIA container runtime mounts the node's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=build image="" archive="" rootfs_only="" print=0
while (($#)); do
  if [[ $1 != --print-image && $1 == --* && $# -lt 2 ]]; then
    echo "build.sh: $1 needs a value" >&2
    exit 2
  fi
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --image) image=$2; shift 2 ;;
    --oci-archive) archive=$2; shift 2 ;;
    --rootfs) rootfs_only=$2; shift 2 ;;
    --print-image) print=1; shift ;;
    *) echo "build.sh: unknown argument '$1' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
version=$(sed -nE 's/^project\(zernel-sched VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
[[ -n $version ]] || { echo "build.sh: no project version in $src/CMakeLists.txt" >&2; exit 1; }
image=${image:-zernel/zernel-scheduler:$version}
if ((print)); then
  echo "$image"
  exit 0
fi
[[ -x $build/bin/zernel-scheduler ]] ||
  { echo "build.sh: $build/bin/zernel-scheduler is not built (cmake --build $build)" >&2; exit 1; }
read -ra buildah_args <<< "${BUILDAH_ARGS:-}"
if [[ -z $rootfs_only ]] && ! command -v buildah > /dev/null; then
  echo "build.sh: buildah is not installed (apt-get install buildah), or use --rootfs DIR" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=${rootfs_only:-$work/rootfs}
mkdir -p "$root"

# The installed tree, without what a container has no use for (docs, man page, completion, unit).
DESTDIR=$root cmake --install "$build" --prefix /usr --strip > "$work/install.log"
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/bash-completion" \
  "$root/usr/lib/systemd" "$root/lib/systemd"

# Its shared libraries and the dynamic loader, at the paths ldd names (and the targets of links).
copy_lib() {
  local lib=$1
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
}
libs=$(ldd "$root/usr/bin/zernel-scheduler" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
[[ -n $libs ]] || { echo "build.sh: ldd found no libraries (a static binary?)" >&2; exit 1; }
for lib in $libs; do copy_lib "$lib"; done

# Directories the daemon uses (mounted over in Kubernetes), and a passwd for root's name.
mkdir -p "$root"/{tmp,run/zernel,var/lib/zernel,proc,sys,dev,etc/zernel}
chmod 1777 "$root/tmp"
chmod 0700 "$root/run/zernel" "$root/var/lib/zernel"
echo "root:x:0:0:root:/root:/usr/bin/zernel-scheduler" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"

# It must start in its own tree: a library ldd missed fails here, not in a cluster (chroot
# needs root; otherwise say that this check did not run).
if [[ $(id -u) -ne 0 ]]; then
  echo "build.sh: not root: not checking that the tree runs (chroot)" >&2
  echo "(unchecked)" > "$work/version"
elif ! chroot "$root" /usr/bin/zernel-scheduler --version > "$work/version" 2>&1; then
  echo "build.sh: the assembled tree does not run: $(cat "$work/version")" >&2
  exit 1
fi
echo "build.sh: tree: $(du -sh "$root" | cut -f1), $(cat "$work/version"), libraries: $(echo $libs)"
[[ -n $rootfs_only ]] && exit 0

ctr=$(buildah "${buildah_args[@]}" from --name "zernel-image-$$" scratch)
cleanup() { buildah "${buildah_args[@]}" rm "$ctr" > /dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
buildah "${buildah_args[@]}" copy "$ctr" "$root" / > /dev/null
buildah "${buildah_args[@]}" config \
  --entrypoint '["/usr/bin/zernel-scheduler"]' \
  --cmd '--config /etc/zernel/scheduler.toml' \
  --port 9093/tcp \
  --user 0:0 \
  --workingdir / \
  --label org.opencontainers.image.title=zernel-scheduler \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.description="ML-aware CPU scheduler for GPU servers" \
  "$ctr"
buildah "${buildah_args[@]}" commit --quiet "$ctr" "$image" > "$work/id"
echo "build.sh: image $image ($(cut -c1-12 "$work/id"))"
if [[ -n $archive ]]; then
  rm -f "$archive"
  buildah "${buildah_args[@]}" push --quiet "$image" "oci-archive:$archive:$image"
  echo "build.sh: OCI archive $archive ($(du -h "$archive" | cut -f1))"
fi
