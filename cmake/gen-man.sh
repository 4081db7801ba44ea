#!/usr/bin/env bash
# Writes the man page of zernel-scheduler from its own --help, at build time (cmake/ManPage.cmake):
#   gen-man.sh HELP2MAN BINARY STATIC_INCLUDE OUTPUT
# help2man formats the top-level --help and --version; every subcommand's --help (found by walking
# the "Subcommands:" lists of CLI11's help, so a new subcommand needs no change here) becomes a
# subsection of SUBCOMMANDS; STATIC_INCLUDE (help2man's include format) adds the sections that
# --help cannot say (FILES, ENVIRONMENT, EXIT STATUS, SEE ALSO).
set -euo pipefail
help2man=$1 bin=$2 static=$3 out=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# help2man names the page after the program it runs, and CLI11 prints argv[0] in its usage
# lines: run the binary as plain "zernel-scheduler".
cat > "$work/zernel-scheduler" <<WRAP
#!/usr/bin/env bash
exec -a zernel-scheduler "$(realpath "$bin")" "\$@"
WRAP
chmod +x "$work/zernel-scheduler"
prog="$work/zernel-scheduler"

# subcommands PATH...: the subcommand names listed in `zernel-scheduler PATH... --help`.
subcommands() {
  "$prog" "$@" --help | awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}'
}

# roff-escape a help text for a .nf block: backslashes, and leading dots or quotes.
escape() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }

{
  cat "$static"
  echo "[SUBCOMMANDS]"
  echo "Each subcommand takes its own options; \\fBzernel-scheduler\\fR \\fISUBCOMMAND\\fR \\fB--help\\fR prints them."
  walk() {
    local sub
    for sub in $(subcommands "$@"); do
      echo ".SS \"zernel-scheduler $* $sub\"" | sed 's/  */ /g'
      echo ".nf"
      "$prog" "$@" "$sub" --help | escape
      echo ".fi"
      walk "$@" "$sub"
    done
  }
  walk
} > "$work/include.h2m"

"$help2man" --no-info --section=8 --name="ML-aware CPU scheduler for GPU servers" \
  --include="$work/include.h2m" --output="$work/page.8" "$prog"
# help2man could not find a --help it understood: it would still write a page, an empty one.
grep -q '^\.SH OPTIONS' "$work/page.8" || { echo "gen-man.sh: no OPTIONS section in the page" >&2; exit 1; }
mv "$work/page.8" "$out"
