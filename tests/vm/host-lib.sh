# shellcheck shell=bash
# shellcheck disable=SC2034 # here and build are the sourcing script's
# The host side's shared start of tests/vm/*_test.sh (bash): `. "$(dirname "$0")/host-lib.sh"`.
# Sets `here` (tests/vm), `build` (ZERNEL_BUILD_DIR, else <repo>/build) and `test_name` (vm.NAME).
set -euo pipefail
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$here/../../build}")
test_name=vm.$(basename "$0" _test.sh)

# need_bin NAME [HINT]: exit 1 unless the build has bin/NAME.
need_bin() {
  [ -x "$build/bin/$1" ] || { echo "$test_name: no $build/bin/$1${2:+ ($2)}" >&2; exit 1; }
}

# run_guest [--add PATH]...: runs the guest script read from stdin (busybox sh; it starts with
# `. /zernel/guest-lib.sh` for the helpers) as root in one VM through run-in-vm.sh, with the given
# extra files; exits with its status.
# shellcheck disable=SC2120 # the --add arguments are optional
run_guest() {
  local guest rc=0
  guest=$(mktemp --suffix=.sh)
  cat > "$guest"
  "$here/run-in-vm.sh" "$@" --add "$guest" -- sh "$guest" || rc=$?
  rm -f "$guest"
  exit "$rc"
}
