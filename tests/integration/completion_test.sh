#!/usr/bin/env bash
# deploy/bash-completion/zernel-scheduler: sourced in bash, it completes subcommands, options and
# option values; and it cannot drift from the CLI: for every subcommand path that --help lists
# (walked recursively), the options it offers after "-" are exactly those of that path's --help,
# and the subcommands it offers exactly those listed there. An option added to the CLI without
# the completion (or removed from it) fails this test.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
Z="$BIN/zernel-scheduler"
COMPLETION="$SRC/deploy/bash-completion/zernel-scheduler"
[[ -x $Z ]] || skip "$Z is not built"

# complete WORD...: COMPREPLY, sorted one per line, for the command line WORD... with the cursor
# on the last word (bash, the completion sourced, as bash-completion would call it).
complete_words() {
  bash -c '. "$1" || exit 1; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
    COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; _zernel_scheduler zernel-scheduler "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    printf "%s\n" "${COMPREPLY[@]}"' _ "$COMPLETION" zernel-scheduler "$@" | sed '/^$/d' | sort
}
# help_options PATH...: the options --help lists for PATH, one per line, sorted ("-c,--config
# TEXT" gives -c and --config).
help_options() {
  "$Z" "$@" --help | awk '/^[A-Za-z]+:$/ {sec = $1} sec == "Options:" && /^  -/ {print $1}' |
    tr ',' '\n' | sed 's/[ =].*//' | sed '/^$/d' | sort
}
help_subcommands() {
  "$Z" "$@" --help | awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}' | sort
}

check "the completion registers itself for zernel-scheduler" \
  "bash -c '. \"$COMPLETION\" && complete -p zernel-scheduler' | grep -q -- '-F _zernel_scheduler'"

# help_valued PATH...: the options of PATH that take a value (a type after the name: TEXT, UINT...).
help_valued() {
  "$Z" "$@" --help | awk '/^[A-Za-z]+:$/ {sec = $1} sec == "Options:" && /^  -[^ ]* [A-Z]/ {print $1}' |
    tr ',' '\n' | sed '/^$/d'
}
valued_cli=""
paths=0
walk() {
  local sub opts_cli opts_comp subs_cli subs_comp
  opts_cli=$(help_options "$@")
  opts_comp=$(complete_words "$@" -)
  paths=$((paths + 1))
  valued_cli+="$(help_valued "$@")"$'\n'
  if [[ -n $opts_cli && $opts_cli == "$opts_comp" ]]; then
    pass
  else
    fail "options of 'zernel-scheduler $*': --help lists [$(echo $opts_cli)], the completion offers [$(echo $opts_comp)]"
  fi
  subs_cli=$(help_subcommands "$@")
  subs_comp=$(complete_words "$@" "")
  if [[ -n $subs_cli ]]; then
    [[ $subs_cli == "$subs_comp" ]] && pass ||
      fail "subcommands of 'zernel-scheduler $*': --help lists [$(echo $subs_cli)], the completion offers [$(echo $subs_comp)]"
  fi
  for sub in $subs_cli; do walk "$@" "$sub"; done
}
walk
valued_cli=$(echo "$valued_cli" | sed '/^$/d' | sort -u)
valued_comp=$(bash -c '. "$1" && printf "%s\n" $_zernel_scheduler_valued' _ "$COMPLETION" | sort -u)
check "the options that take a value are those of --help [$(echo $valued_cli)] vs [$(echo $valued_comp)]" \
  "[[ -n \$valued_cli && \$valued_cli == \"\$valued_comp\" ]]"
check "every subcommand path was compared (12: top level, 7 subcommands, 4 of tenant)" "((paths == 12))"

# A few cases as a user types them.
check "'te' completes to tenant" "[[ \$(complete_words te) == tenant ]]"
check "'tenant a' offers add and assign" "[[ \$(complete_words tenant a | tr '\n' ' ') == 'add assign ' ]]"
check "--backend values" "[[ \$(complete_words --backend '' | tr '\n' ' ') == 'auto observe sched_ext userspace ' ]]"
check "--backend s: sched_ext only" "[[ \$(complete_words --backend s) == sched_ext ]]"
check "an option's value is not a subcommand: '--config status st' still offers status" \
  "[[ \$(complete_words --config status st) == status ]]"
check "trace --clock values" "[[ \$(complete_words trace --clock '' | tr '\n' ' ') == 'monotonic realtime ' ]]"
check "tenant add --class values" \
  "[[ \$(complete_words tenant add --class in | tr '\n' ' ') == 'inference interactive ' ]]"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/c"
touch "$tmp/c/a.toml" "$tmp/c/b.toml"
check "--config completes files" "[[ \$(complete_words --config $tmp/c/ | tr '\n' ' ') == '$tmp/c/a.toml $tmp/c/b.toml ' ]]"
check "check-config's argument completes files" "[[ \$(complete_words check-config $tmp/c/a) == $tmp/c/a.toml ]]"
check "tenant assign --pid offers running pids (this shell's)" "complete_words tenant assign --pid $$ | grep -qx $$"
check "no options of another subcommand: 'status --o' offers nothing" "[[ -z \$(complete_words status --o) ]]"

summary
