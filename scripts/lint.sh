#!/usr/bin/env bash
# scripts/lint.sh [BUILD_DIR] [FILE...]: clang-tidy (Debian's clang-tidy-19, scripts/setup.sh) with
# the checks of .clang-tidy over every source file under src/ that BUILD_DIR (build) compiles,
# from its compile_commands.json, one process per core. Any finding fails (WarningsAsErrors).
# Needs a built BUILD_DIR: the BPF skeletons and generated headers must exist. Given FILEs, only
# those are checked. Run by .ci/run; about 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
tidy=${CLANG_TIDY:-clang-tidy-19}
jobs=$(nproc 2>/dev/null || echo 2)
command -v "$tidy" > /dev/null || { echo "lint: $tidy not found: run scripts/setup.sh" >&2; exit 1; }
[[ -f $build/compile_commands.json ]] ||
  { echo "lint: no $build/compile_commands.json: configure and build $build first" >&2; exit 1; }

if (($# > 0)); then
  files=("$@")
else
  # The translation units under src/ (headers are checked through them: HeaderFilterRegex).
  mapfile -t files < <(python3 -c '
import json, os, sys
root = os.getcwd() + "/src/"
seen = sorted({e["file"] for e in json.load(open(sys.argv[1])) if e["file"].startswith(root)})
print("\n".join(os.path.relpath(f) for f in seen))' "$build/compile_commands.json")
fi
((${#files[@]} > 0)) || { echo "lint: no source files under src/ in $build" >&2; exit 1; }

start=$(date +%s)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One file per clang-tidy; its output is kept only when it fails. The compiler's own warnings are
# GCC's job (the build): clang's, GCC's flags it does not know included, are not errors here.
status=0
# shellcheck disable=SC2016 # the sh -c script expands its own arguments
printf '%s\0' "${files[@]}" | xargs -0 -P "$jobs" -I{} sh -c '
  log="$1/$(printf %s "$4" | tr / _).log"
  "$2" -p "$3" --quiet --extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-error "$4" > "$log" 2>&1 || echo "$4" >> "$1/failed"
' sh "$out" "$tidy" "$build" {} || status=$?
if [[ -f $out/failed ]]; then
  while read -r f; do
    echo "== $f"
    grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' "$out/$(printf %s "$f" | tr / _).log"
  done < <(sort "$out/failed")
  echo "lint: clang-tidy found problems in $(wc -l < "$out/failed") of ${#files[@]} files ($(( $(date +%s) - start )) s)" >&2
  exit 1
fi
((status == 0)) || { echo "lint: xargs failed ($status)" >&2; exit 1; }
echo "lint: clang-tidy clean on ${#files[@]} files ($(( $(date +%s) - start )) s)"
