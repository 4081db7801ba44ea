#!/usr/bin/env bash
# `cmake --install` into a DESTDIR, with --prefix /usr and with the default /usr/local: the
# GNUInstallDirs tree (binary, man page, bash completion, systemd unit, example config, docs),
# the installed binary runs, the unit's ExecStart and ExecStartPre name the installed binary and
# config (which exist in the tree) and the unit passes `systemd-analyze verify`, the man page
# renders and has a section for every subcommand.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$tmp"' EXIT
build=$(cd "$BIN/.." && pwd)
[[ -f $build/cmake_install.cmake ]] || skip "$build is not a configured CMake build tree"

# install_into DESTDIR [PREFIX]: cmake --install, quietly; the log on failure.
install_into() {
  local dest=$1
  shift
  DESTDIR=$dest cmake --install "$build" "$@" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; return 1; }
}

d="$tmp/usr-root"
check "cmake --install --prefix /usr into a DESTDIR" "install_into $d --prefix /usr"
for f in usr/bin/zernel-scheduler usr/share/man/man8/zernel-scheduler.8 \
  usr/share/bash-completion/completions/zernel-scheduler usr/lib/systemd/system/zernel-scheduler.service \
  etc/zernel/scheduler.toml usr/share/doc/zernel-sched/README.md usr/share/doc/zernel-sched/deploy.md \
  usr/share/doc/zernel-sched/configuration.md usr/share/doc/zernel-sched/operations.md; do
  check "installed: /$f" "[[ -s $d/$f ]]"
done
check "the binary is executable" "[[ -x $d/usr/bin/zernel-scheduler ]]"
check "nothing but zernel-scheduler in bin/ (the test tools are not shipped)" \
  "[[ \$(ls $d/usr/bin) == zernel-scheduler ]]"
check "the installed binary runs" "$d/usr/bin/zernel-scheduler --version | grep -q '^zernel-scheduler [0-9]'"
check "the installed example config passes check-config" \
  "$d/usr/bin/zernel-scheduler check-config $d/etc/zernel/scheduler.toml > /dev/null"
if [[ -d $SRC/deploy/monitoring ]]; then
  check "deploy/monitoring is installed under share/zernel-sched/monitoring" \
    "diff -r $SRC/deploy/monitoring $d/usr/share/zernel-sched/monitoring > /dev/null"
fi

unit="$d/usr/lib/systemd/system/zernel-scheduler.service"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
exec_pre=$(sed -n 's/^ExecStartPre=//p' "$unit")
check "unit: ExecStart=/usr/bin/zernel-scheduler --config /etc/zernel/scheduler.toml (was: $exec_start)" \
  "[[ '$exec_start' == '/usr/bin/zernel-scheduler --config /etc/zernel/scheduler.toml' ]]"
check "unit: ExecStartPre checks the installed config with the installed binary" \
  "[[ '$exec_pre' == '/usr/bin/zernel-scheduler check-config /etc/zernel/scheduler.toml' ]]"
read -r exe _ cfg <<< "$exec_start"
check "unit: ExecStart's binary exists in the tree" "[[ -x $d$exe ]]"
check "unit: ExecStart's config exists in the tree" "[[ -f $d$cfg ]]"
check "unit: nothing else of /usr/local is left in it" "! grep -q /usr/local $unit"
check "unit: the rest is deploy/zernel-scheduler.service" \
  "diff <(grep -v '^ExecStart\|^Documentation\|^#' $unit) <(grep -v '^ExecStart\|^Documentation\|^#' \"$SRC/deploy/zernel-scheduler.service\") > /dev/null"
if command -v systemd-analyze > /dev/null; then
  # verify resolves ExecStart on this machine: point it at the tree.
  sed "s#/usr/bin/zernel-scheduler#$d/usr/bin/zernel-scheduler#g; s#/etc/zernel/#$d/etc/zernel/#g" \
    "$unit" > "$tmp/zernel-scheduler.service"
  # verify also runs `man` for Documentation=man:zernel-scheduler(8): the tree's man page.
  check "systemd-analyze verify the installed unit (and its man: link)" \
    "MANPATH=$d/usr/share/man systemd-analyze verify $tmp/zernel-scheduler.service > $tmp/verify.txt 2>&1 && ! grep -q . $tmp/verify.txt"
else
  echo "SKIP (one check): systemd-analyze is not installed"
fi

# The man page: generated from --help (cmake/gen-man.sh), one subsection per subcommand.
page="$d/usr/share/man/man8/zernel-scheduler.8"
check "man page: .TH ZERNEL-SCHEDULER 8 with the version" \
  "grep -q '^\.TH ZERNEL-SCHEDULER \"8\" .*\"zernel-scheduler $("$BIN/zernel-scheduler" --version | awk '{print $2}')\"' $page"
for sub in check-config info tenant "tenant add" "tenant remove" "tenant list" "tenant assign" status top restore; do
  check "man page: a section for '$sub'" "grep -qx '\.SS \"zernel-scheduler $sub\"' $page"
done
# man_has_options PAGE: every option of the top-level --help is in PAGE (roff writes - as \-).
man_has_options() {
  local o
  for o in $("$BIN/zernel-scheduler" --help | grep -o '^  -[^ ]*' | tr ',' ' '); do
    grep -qF -- "${o//-/\\-}" "$1" || { echo "the man page lacks $o"; return 1; }
  done
}
check "man page: every top-level option of --help" "man_has_options $page"
sed 's/--demo/--dem0/; s/\\-\\-demo/\\-\\-dem0/' "$page" > "$tmp/mutated.8"
check "(the check above fails for a page without --demo)" "! man_has_options $tmp/mutated.8 > /dev/null"
if command -v man > /dev/null; then
  check "man page renders without warnings" \
    "man --warnings -l $page > $tmp/man.txt 2> $tmp/man.err && ! grep -q . $tmp/man.err && grep -q '^SUBCOMMANDS' $tmp/man.txt"
fi

# The default prefix: /usr/local/bin, the unit there too, the config under /usr/local/etc.
d2="$tmp/local-root"
check "cmake --install with the default prefix" "install_into $d2 --prefix /usr/local"
check "unit (prefix /usr/local): ExecStart at /usr/local/bin with /usr/local/etc/zernel/scheduler.toml" \
  "grep -qx 'ExecStart=/usr/local/bin/zernel-scheduler --config /usr/local/etc/zernel/scheduler.toml' $d2/usr/local/lib/systemd/system/zernel-scheduler.service && [[ -f $d2/usr/local/etc/zernel/scheduler.toml ]]"

summary
