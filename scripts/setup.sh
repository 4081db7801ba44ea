#!/usr/bin/env bash
# Installs every build and test dependency of zernel-sched on Debian 12 (bookworm), from Debian's
# own packages. Idempotent: packages already present are left alone, nothing is upgraded, and no
# other suite is used. Run as root (or through sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  valgrind python3
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-upgrade: never upgrade what the base system already has.
$SUDO apt-get install -y -qq --no-install-recommends --no-upgrade "${missing[@]}"
echo "setup: done"
