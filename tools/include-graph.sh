#!/usr/bin/env bash
# Counts #include "X/..." lines between the folders of src/ (and from bpf/ into src/ and back):
# one line "from -> to: count" per pair of different folders, sorted.
#   tools/include-graph.sh            the working tree
#   tools/include-graph.sh <commit>   a commit, read from git (e.g. 49d69ff)
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
rev=${1:-}

list_files() {
  if [[ -n $rev ]]; then git ls-tree -r --name-only "$rev" -- src bpf
  else git ls-files --cached --others --exclude-standard -- src bpf; fi
}
show() {
  if [[ -n $rev ]]; then git show "$rev:$1"; else cat "$1"; fi
}

folders='common|sys|policy|config|collect|enforce|telemetry|daemon|cli'
list_files | grep -E '\.(c|h|cpp|hpp|in)$' | while read -r f; do
  case $f in
    src/*) from=${f#src/}; from=${from%%/*} ;;
    bpf/*) from=bpf ;;
    *) continue ;;
  esac
  show "$f" | sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' |
    while read -r inc; do
      # "../../../bpf/intf.h" and "bpf/intf.h" and "intf.h" (from outside bpf/) all name bpf/.
      inc=${inc##*../}
      if [[ $inc =~ ^($folders)/ ]]; then to=${inc%%/*}
      elif [[ $inc == bpf/* || ( $inc == intf.h && $from != bpf ) ]]; then to=bpf
      else continue; fi
      if [[ $from != "$to" ]]; then echo "$from -> $to"; fi
    done
done | sort | uniq -c | awk '{ printf "%-22s %4d\n", $2 " " $3 " " $4 ":", $1 }'
