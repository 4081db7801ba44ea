# shellcheck shell=bash
# private-apt.sh: sourced (bash) by fetch-kernel.sh and fetch-qemu.sh.
#
# papt_init DIR SUITE  sets the array APT to apt options that read ONE Debian suite through a private
# sources list, lists directory and caches under DIR, then runs `apt-get update` with them.
# The system's sources, preferences and dpkg state are never written: callers only use
# `apt-cache` and `apt-get download`, and unpack with `dpkg -x`. Adding a newer suite (trixie, sid)
# to the system instead would let apt upgrade libc6 and friends (see /work/shared/vm-recipe.md §0).
# Env ZERNEL_DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
papt_init() {
  local dir=$1 suite=$2
  mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/cache" "$dir/preferences.d"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
    "${ZERNEL_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main" > "$dir/sources.list"
  APT=(-q
    -o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=-
    -o Dir::State::lists="$dir/lists" -o Dir::Cache="$dir/cache"
    -o Dir::Cache::archives="$dir/archives"
    -o Dir::Etc::preferences=/dev/null -o Dir::Etc::preferencesparts="$dir/preferences.d"
    -o APT::Sandbox::User=root -o Acquire::Languages=none)
  if ! apt-get "${APT[@]}" update > "$dir/update.log" 2>&1; then
    cat "$dir/update.log" >&2
    echo "error: apt-get update of $suite failed (no network? configure with -DZERNEL_BPF=OFF)" >&2
    return 1
  fi
}

# papt_version PACKAGE: the candidate version of PACKAGE in the private suite (empty if none).
papt_version() {
  apt-cache "${APT[@]}" show "$1" 2>/dev/null | sed -n 's/^Version: //p' | head -1
}
