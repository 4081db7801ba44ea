# The tracing programs (bpf/probes.bpf.c: uprobes on libcuda's synchronisation calls, the futex
# tracepoint) and their loader (src/collect/probes/), which join zernel_collect. Included from
# the top CMakeLists inside if(ZERNEL_BPF), after add_subdirectory(src):
#   include(bpf/probes.cmake)
# ZERNEL_HAVE_PROBES (PUBLIC, so the daemon and the unit tests see it) says the probes are there;
# without the BPF toolchain none of this exists and the daemon runs without those signals.
if(NOT ZERNEL_BPF)
  return()
endif()

zernel_bpf_skeleton(zernel_probes_skel ${CMAKE_CURRENT_LIST_DIR}/probes.bpf.c)

file(GLOB _zernel_probe_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/collect/probes/*.cpp)
target_sources(zernel_collect PRIVATE ${_zernel_probe_srcs})
# bpf/ for probes.h (the header both sides share); the skeleton and libbpf through the target.
target_include_directories(zernel_collect PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(zernel_collect PRIVATE zernel_probes_skel)
target_compile_definitions(zernel_collect PUBLIC ZERNEL_HAVE_PROBES=1)

# The task iterator behind the tenants' CPU time (bpf/task_cpu.bpf.c), read by
# src/collect/probes/task_cpu_iter.cpp.
zernel_bpf_skeleton(zernel_task_cpu_skel ${CMAKE_CURRENT_LIST_DIR}/task_cpu.bpf.c)
target_link_libraries(zernel_collect PRIVATE zernel_task_cpu_skel)
