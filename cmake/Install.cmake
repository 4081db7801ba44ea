# `cmake --install build [--prefix /usr]` (or DESTDIR=...): the GNUInstallDirs layout.
#
#   bin/zernel-scheduler                               the daemon and its CLI
#   <share>/man/man8/zernel-scheduler.8                from --help at build time (cmake/ManPage.cmake)
#   <share>/bash-completion/completions/zernel-scheduler
#   lib/systemd/system/zernel-scheduler.service        ExecStart at the installed binary and config
#   <sysconfdir>/zernel/scheduler.toml                 the example config (every key at its default);
#                                                      /etc/zernel for the prefix /usr
#   <share>/doc/zernel-sched/                          README, deploy notes, operations, config docs
#   <share>/zernel-sched/monitoring/                   Grafana dashboard and alert rules, if present
#
# Only zernel-scheduler ships: zernel-workload, zernel-scx-driver and the emulated GPU are test tools.
# The unit goes to <prefix>/lib/systemd/system (/usr/lib/systemd/system for --prefix /usr, where
# systemd looks on merged-/usr systems; `-DZERNEL_SYSTEMD_UNIT_DIR=...` overrides it).
include(GNUInstallDirs)

set(ZERNEL_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit is installed (relative: under the install prefix)")

install(TARGETS zernel-scheduler RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The example config and the unit: their paths depend on the prefix given to `cmake --install`
# (/usr: /etc/zernel, /usr/bin), so they are placed, and the unit written, at install time.
install(CODE "
  set(ZERNEL_SOURCE_DIR \"${CMAKE_SOURCE_DIR}\")
  set(ZERNEL_BINARY_DIR \"${CMAKE_BINARY_DIR}\")
  set(ZERNEL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(ZERNEL_SYSCONFDIR \"${CMAKE_INSTALL_SYSCONFDIR}\")
  set(ZERNEL_UNIT_DIR \"${ZERNEL_SYSTEMD_UNIT_DIR}\")
  set(ZERNEL_DOCDIR \"${CMAKE_INSTALL_DOCDIR}\")")
install(SCRIPT ${CMAKE_SOURCE_DIR}/cmake/InstallPaths.cmake)

install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/configuration.md
              ${CMAKE_SOURCE_DIR}/docs/operations.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_SOURCE_DIR}/deploy/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
        RENAME deploy.md)

install(FILES ${CMAKE_SOURCE_DIR}/deploy/bash-completion/zernel-scheduler
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)

include(ManPage)
if(ZERNEL_MAN_PAGE)
  install(FILES ${ZERNEL_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
endif()

# OPTIONAL: a tree without deploy/monitoring installs without it.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/deploy/monitoring/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zernel-sched/monitoring OPTIONAL)
