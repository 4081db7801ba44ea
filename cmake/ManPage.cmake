# The man page, zernel-scheduler.8, generated from the built binary's --help (cmake/gen-man.sh,
# with help2man) so that it cannot disagree with the CLI. Sets ZERNEL_MAN_PAGE to its path.
option(ZERNEL_MAN "Generate the man page (needs help2man)" ON)
set(ZERNEL_MAN_PAGE "")
if(ZERNEL_MAN)
  find_program(HELP2MAN_EXECUTABLE help2man)
  if(NOT HELP2MAN_EXECUTABLE)
    message(FATAL_ERROR "help2man not found: install it (scripts/setup.sh) or configure with "
                        "-DZERNEL_MAN=OFF to build without the man page")
  endif()
  set(ZERNEL_MAN_PAGE ${CMAKE_BINARY_DIR}/man/zernel-scheduler.8)
  add_custom_command(
    OUTPUT ${ZERNEL_MAN_PAGE}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND bash ${CMAKE_SOURCE_DIR}/cmake/gen-man.sh ${HELP2MAN_EXECUTABLE}
            $<TARGET_FILE:zernel-scheduler> ${CMAKE_SOURCE_DIR}/deploy/man/zernel-scheduler.h2m
            ${ZERNEL_MAN_PAGE}
    DEPENDS zernel-scheduler ${CMAKE_SOURCE_DIR}/cmake/gen-man.sh
            ${CMAKE_SOURCE_DIR}/deploy/man/zernel-scheduler.h2m
    COMMENT "Generating the man page zernel-scheduler.8 from --help"
    VERBATIM)
  add_custom_target(zernel-man ALL DEPENDS ${ZERNEL_MAN_PAGE})
endif()
