# Run by `cmake --install` (install(SCRIPT), cmake/Install.cmake): installs the example config
# and the systemd unit at paths that follow the prefix given at install time (--prefix), which
# the configure-time CMAKE_INSTALL_FULL_* variables do not know.
#   <sysconfdir>/zernel/scheduler.toml: sysconfdir is /etc for the prefix /usr (as GNUInstallDirs
#     has it), else <prefix>/etc, or CMAKE_INSTALL_SYSCONFDIR when that is absolute
#   <unit dir>/zernel-scheduler.service: deploy/zernel-scheduler.service with ExecStart and
#     ExecStartPre at <prefix>/bin/zernel-scheduler and that config
# Inputs (set by install(CODE)): ZERNEL_SOURCE_DIR, ZERNEL_BINARY_DIR, ZERNEL_BINDIR,
# ZERNEL_SYSCONFDIR, ZERNEL_UNIT_DIR, ZERNEL_DOCDIR (as configured: relative or absolute).
function(zernel_abs out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

if(IS_ABSOLUTE "${ZERNEL_SYSCONFDIR}")
  set(_sysconf "${ZERNEL_SYSCONFDIR}")
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr" OR CMAKE_INSTALL_PREFIX STREQUAL "/usr/")
  set(_sysconf "/etc")
else()
  set(_sysconf "${CMAKE_INSTALL_PREFIX}/${ZERNEL_SYSCONFDIR}")
endif()
zernel_abs(_bindir "${ZERNEL_BINDIR}")
zernel_abs(_unitdir "${ZERNEL_UNIT_DIR}")
zernel_abs(_docdir "${ZERNEL_DOCDIR}")

file(INSTALL DESTINATION "${_sysconf}/zernel" TYPE FILE
     FILES "${ZERNEL_SOURCE_DIR}/deploy/scheduler.toml")

file(READ "${ZERNEL_SOURCE_DIR}/deploy/zernel-scheduler.service" _unit)
string(REPLACE "/usr/local/bin/zernel-scheduler" "${_bindir}/zernel-scheduler" _unit "${_unit}")
string(REPLACE "/etc/zernel/scheduler.toml" "${_sysconf}/zernel/scheduler.toml" _unit "${_unit}")
string(REPLACE "file:///usr/local/share/doc/zernel/README.md"
       "man:zernel-scheduler(8) file://${_docdir}/README.md" _unit "${_unit}")
if(NOT _unit MATCHES "\nExecStart=${_bindir}/zernel-scheduler ")
  message(FATAL_ERROR "deploy/zernel-scheduler.service: its ExecStart is not "
                      "/usr/local/bin/zernel-scheduler any more; update cmake/InstallPaths.cmake")
endif()
file(WRITE "${ZERNEL_BINARY_DIR}/deploy/zernel-scheduler.service" "${_unit}")
file(INSTALL DESTINATION "${_unitdir}" TYPE FILE
     FILES "${ZERNEL_BINARY_DIR}/deploy/zernel-scheduler.service")
