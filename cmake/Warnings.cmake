# zernel_set_warnings(target): the project's warning set, as errors unless ZERNEL_WERROR is off.
function(zernel_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Wunused -Woverloaded-virtual -Wconversion -Wsign-conversion
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
  if(ZERNEL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
