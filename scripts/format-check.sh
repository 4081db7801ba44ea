#!/usr/bin/env bash
# scripts/format-check.sh [--fix] [BASE]: clang-format (Debian's clang-format-19, scripts/setup.sh)
# on the C and C++ lines changed since BASE; untouched lines are never checked, so the code base
# need not be reformatted at once. Prints the diff that would make them conform and fails; with
# --fix, applies it to the working tree instead.
#
# BASE, when not given (what .ci/run does):
#   - on a branch that main does not contain: the merge base with main, i.e. every line the
#     branch changes;
#   - on main itself (a clean clone in CI, HEAD = main): HEAD^, the last commit, or for a merge
#     commit the whole branch it merged. Commits pushed to main together are checked only in the
#     last one; a branch checked before its merge was checked whole.
#   - ZERNEL_FORMAT_BASE=<commit> overrides both.
# Without that history (a shallow clone with one commit) nothing is checked, and it says so.
#
# Styles: .clang-format (Google-based, 100 columns) for C++ and the C of tools/fake_gpu;
# bpf/.clang-format (kernel style, tabs) for bpf/ and the C files that speak libbpf's or the
# kernel's idiom: src/enforce/scx/skel_shim.[ch], tools/scx_driver/*.c, bench/vm/*.c,
# bench/*.bpf.c.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=${CLANG_FORMAT:-clang-format-19}
git_fmt=${GIT_CLANG_FORMAT:-git-clang-format-19}
if ! command -v "$fmt" > /dev/null || ! command -v "$git_fmt" > /dev/null; then
  echo "format-check: $fmt or $git_fmt not found: run scripts/setup.sh" >&2
  exit 1
fi

fix=0
if [[ ${1:-} == --fix ]]; then fix=1; shift; fi
base=${1:-${ZERNEL_FORMAT_BASE:-}}
if [[ -z $base ]]; then
  main=""
  for ref in main origin/main; do
    if git rev-parse -q --verify "$ref^{commit}" > /dev/null; then main=$ref; break; fi
  done
  if [[ -n $main ]] && ! git merge-base --is-ancestor HEAD "$main"; then
    base=$(git merge-base HEAD "$main")
  elif git rev-parse -q --verify 'HEAD^' > /dev/null; then
    base=HEAD^
  else
    echo "format-check: no parent commit and no main to compare with (shallow clone?): nothing checked"
    exit 0
  fi
fi
git rev-parse -q --verify "$base^{commit}" > /dev/null ||
  { echo "format-check: base $base is not a commit" >&2; exit 1; }

kernel_style=('bpf/**' src/enforce/scx/skel_shim.c src/enforce/scx/skel_shim.h
  'tools/scx_driver/*.c' 'bench/vm/*.c' 'bench/*.bpf.c')
excludes=()
for p in "${kernel_style[@]}"; do excludes+=(":(exclude,glob)$p"); done
exts=c,h,cc,cpp,hpp

# run STYLE PATHSPEC...: git clang-format over the changed lines of the files in PATHSPEC.
run() {
  local style=$1; shift
  if ((fix)); then
    "$git_fmt" --binary "$(command -v "$fmt")" --extensions "$exts" --style "$style" \
      "$base" -- "$@" | grep -v -e '^no modified files to format$' \
        -e '^clang-format did not modify any files$' || true
  else
    # Exit 1 with a diff when something would change; the diff is on stdout.
    "$git_fmt" --binary "$(command -v "$fmt")" --extensions "$exts" --style "$style" --diff \
      "$base" -- "$@" > "$out" || true
    if grep -q '^[-+]' "$out"; then cat "$out"; bad=1; fi
  fi
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bad=0
globbed=(); for p in "${kernel_style[@]}"; do globbed+=(":(glob)$p"); done
run file . "${excludes[@]}"
run file:bpf/.clang-format "${globbed[@]}"

what="the lines changed since $(git rev-parse --short "$base") ($base)"
if ((fix)); then
  echo "format-check: formatted $what"
elif ((bad)); then
  echo "format-check: $what do not follow .clang-format; scripts/format-check.sh --fix $base formats them" >&2
  exit 1
else
  echo "format-check: $what follow .clang-format"
fi
