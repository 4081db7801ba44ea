# Bpf.cmake: the BPF toolchain and the VM test bench's dependencies, fetched and built once per
# build tree under ${CMAKE_BINARY_DIR}/_deps by the scripts in cmake/deps/ (see docs/vm-testing.md).
#
#   _deps/kernel/<KVER>/{vmlinuz,vmlinux,config}  newest sched_ext kernel of trixie-backports
#   _deps/kernel/current -> <KVER>
#   _deps/qemu/bin/qemu-system-x86_64             QEMU 10 from bookworm-backports (wrapper)
#   _deps/bpf/lib/libbpf.a, include/{bpf,scx}/    libbpf and sched_ext headers of that kernel
#   _deps/bpf/bin/bpftool, _deps/bpf/vmlinux.h    bpftool of that kernel, BTF of that kernel
#
# Targets: kernel-deps, vm-deps (kernel + QEMU), bpf-deps (libbpf, bpftool, vmlinux.h), all in ALL;
# zernel_libbpf (INTERFACE: libbpf.a + headers + libelf/zlib/zstd).
# zernel_bpf_skeleton(TARGET bpf/NAME.bpf.c) compiles a BPF program into ${CMAKE_BINARY_DIR}/bpf/
# NAME.skel.h (struct NAME_bpf, NAME_bpf__open_and_load(), ...) and makes TARGET an INTERFACE library
# that puts it on the include path and links libbpf.
#
# Every step is a custom command whose output is a stamp file, so a second configure or build reuses
# what is there; delete _deps/<part> to fetch or build that part again (the kernel is re-resolved to
# the newest one then). Configure with -DZERNEL_BPF=OFF where nothing can be fetched: no BPF
# targets, no zernel_bpf_skeleton(), and the vm tests are registered as disabled.
include_guard(GLOBAL)

option(ZERNEL_BPF "Fetch the sched_ext test kernel and QEMU, build libbpf/bpftool/vmlinux.h" ON)
if(NOT ZERNEL_BPF)
  message(STATUS "ZERNEL_BPF is OFF: no BPF toolchain, VM tests disabled")
  function(zernel_bpf_skeleton target)
    message(FATAL_ERROR "zernel_bpf_skeleton(${target}) needs -DZERNEL_BPF=ON; "
      "guard the caller with if(ZERNEL_BPF)")
  endfunction()
  return()
endif()

set(ZERNEL_DEPS_DIR ${CMAKE_BINARY_DIR}/_deps)
set(ZERNEL_KERNEL_DIR ${ZERNEL_DEPS_DIR}/kernel)
set(ZERNEL_QEMU_DIR ${ZERNEL_DEPS_DIR}/qemu)
set(ZERNEL_BPF_DIR ${ZERNEL_DEPS_DIR}/bpf)
set(ZERNEL_BPFTOOL ${ZERNEL_BPF_DIR}/bin/bpftool)
set(_zd ${CMAKE_CURRENT_LIST_DIR}/deps)

# Host tools and libraries (scripts/setup.sh installs them); fail here, not half-way into a build.
set(_hint "run scripts/setup.sh, or configure with -DZERNEL_BPF=OFF")
find_program(ZERNEL_CLANG NAMES clang-19 DOC "clang for -target bpf (19: bookworm's newest)")
foreach(tool IN ITEMS apt-get dpkg-deb make zstd xz readelf)
  find_program(_zernel_have_${tool} ${tool})
  if(NOT _zernel_have_${tool})
    message(FATAL_ERROR "ZERNEL_BPF needs '${tool}': ${_hint}")
  endif()
endforeach()
if(NOT ZERNEL_CLANG)
  message(FATAL_ERROR "ZERNEL_BPF needs clang-19: ${_hint}")
endif()
foreach(lib IN ITEMS elf z zstd)
  find_library(ZERNEL_LIB_${lib} ${lib})
  if(NOT ZERNEL_LIB_${lib})
    message(FATAL_ERROR "ZERNEL_BPF needs lib${lib} (-dev package): ${_hint}")
  endif()
endforeach()

# 1. Kernel (+ its source .deb) and QEMU: downloads, a few seconds each.
add_custom_command(OUTPUT ${ZERNEL_KERNEL_DIR}/.stamp
  COMMAND ${_zd}/fetch-kernel.sh ${ZERNEL_KERNEL_DIR}
  DEPENDS ${_zd}/fetch-kernel.sh ${_zd}/private-apt.sh
  COMMENT "Fetching the newest sched_ext kernel from trixie-backports into ${ZERNEL_KERNEL_DIR}"
  USES_TERMINAL VERBATIM)
add_custom_target(kernel-deps ALL DEPENDS ${ZERNEL_KERNEL_DIR}/.stamp)

add_custom_command(OUTPUT ${ZERNEL_QEMU_DIR}/.stamp
  COMMAND ${_zd}/fetch-qemu.sh ${ZERNEL_QEMU_DIR}
  DEPENDS ${_zd}/fetch-qemu.sh ${_zd}/private-apt.sh
  COMMENT "Unpacking QEMU 10 from bookworm-backports into ${ZERNEL_QEMU_DIR}"
  USES_TERMINAL VERBATIM)
add_custom_target(vm-deps ALL DEPENDS ${ZERNEL_QEMU_DIR}/.stamp)
add_dependencies(vm-deps kernel-deps)

# 2. libbpf, bpftool, vmlinux.h from that kernel: about a minute at -j2, once.
set(_zb ${_zd}/build-bpf-tools.sh)
add_custom_command(OUTPUT ${ZERNEL_BPF_DIR}/.libbpf.stamp
  BYPRODUCTS ${ZERNEL_BPF_DIR}/lib/libbpf.a
  COMMAND ${CMAKE_COMMAND} -E env ZERNEL_CLANG=${ZERNEL_CLANG}
    ${_zb} libbpf ${ZERNEL_KERNEL_DIR}/current ${ZERNEL_BPF_DIR}
  DEPENDS ${_zb} ${ZERNEL_KERNEL_DIR}/.stamp
  COMMENT "Building libbpf from the test kernel's source"
  USES_TERMINAL VERBATIM)
add_custom_command(OUTPUT ${ZERNEL_BPF_DIR}/.bpftool.stamp
  BYPRODUCTS ${ZERNEL_BPFTOOL}
  COMMAND ${CMAKE_COMMAND} -E env ZERNEL_CLANG=${ZERNEL_CLANG}
    ${_zb} bpftool ${ZERNEL_KERNEL_DIR}/current ${ZERNEL_BPF_DIR}
  # After libbpf only because both unpack the same source tree.
  DEPENDS ${_zb} ${ZERNEL_KERNEL_DIR}/.stamp ${ZERNEL_BPF_DIR}/.libbpf.stamp
  COMMENT "Building bpftool from the test kernel's source"
  USES_TERMINAL VERBATIM)
add_custom_command(OUTPUT ${ZERNEL_BPF_DIR}/vmlinux.h
  COMMAND ${_zb} vmlinux.h ${ZERNEL_KERNEL_DIR}/current ${ZERNEL_BPF_DIR}
  DEPENDS ${_zb} ${ZERNEL_KERNEL_DIR}/.stamp ${ZERNEL_BPF_DIR}/.bpftool.stamp
  COMMENT "Generating vmlinux.h from the test kernel's BTF (not the host's)"
  VERBATIM)
add_custom_target(bpf-deps ALL DEPENDS
  ${ZERNEL_BPF_DIR}/.libbpf.stamp ${ZERNEL_BPF_DIR}/.bpftool.stamp ${ZERNEL_BPF_DIR}/vmlinux.h)
add_dependencies(bpf-deps kernel-deps)

# libbpf for C/C++ targets. A plain INTERFACE library, not an IMPORTED one: its include directory
# only exists once bpf-deps has run.
add_library(zernel_libbpf INTERFACE)
target_include_directories(zernel_libbpf SYSTEM INTERFACE ${ZERNEL_BPF_DIR}/include)
target_link_libraries(zernel_libbpf INTERFACE
  ${ZERNEL_BPF_DIR}/lib/libbpf.a ${ZERNEL_LIB_elf} ${ZERNEL_LIB_z} ${ZERNEL_LIB_zstd})
add_dependencies(zernel_libbpf bpf-deps)

# clang's own system include directories, added with -idirafter: -target bpf drops them, and
# headers such as asm-generic/errno.h (scx/common.bpf.h) live there. As tools/sched_ext does.
execute_process(COMMAND ${ZERNEL_CLANG} -v -E -x c - INPUT_FILE /dev/null
  OUTPUT_QUIET ERROR_VARIABLE _zclang_v)
string(REGEX MATCH "#include <...> search starts here:\n(.*)\nEnd of search list" _m "${_zclang_v}")
string(REGEX REPLACE "[ \t]*\n[ \t]*" ";" _zsys "${CMAKE_MATCH_1}")
string(STRIP "${_zsys}" _zsys)
set(ZERNEL_BPF_CFLAGS -g -O2 -target bpf -mcpu=v3 -mlittle-endian -D__TARGET_ARCH_x86
  -Wall -Wno-compare-distinct-pointer-types -fms-extensions -Wno-microsoft-anon-tag
  -I${ZERNEL_BPF_DIR} -I${ZERNEL_BPF_DIR}/include -I${ZERNEL_BPF_DIR}/include/bpf-compat
  -I${CMAKE_SOURCE_DIR}/bpf)
foreach(dir IN LISTS _zsys)
  string(STRIP "${dir}" dir)
  if(dir)
    list(APPEND ZERNEL_BPF_CFLAGS -idirafter ${dir})
  endif()
endforeach()

# zernel_bpf_skeleton(TARGET SOURCE): SOURCE is NAME.bpf.c (relative to the calling directory or
# absolute). Produces ${CMAKE_BINARY_DIR}/bpf/NAME.bpf.o, NAME.linked.o and NAME.skel.h, whose
# skeleton is named NAME_bpf (struct NAME_bpf; not NAME, which would clash with namespace zernel).
function(zernel_bpf_skeleton target source)
  get_filename_component(src ${source} ABSOLUTE)
  get_filename_component(file ${src} NAME)
  if(NOT file MATCHES "^([A-Za-z0-9_]+)\\.bpf\\.c$")
    message(FATAL_ERROR "zernel_bpf_skeleton: ${source} is not NAME.bpf.c")
  endif()
  set(name ${CMAKE_MATCH_1})
  set(out ${CMAKE_BINARY_DIR}/bpf)
  file(MAKE_DIRECTORY ${out})
  add_custom_command(OUTPUT ${out}/${name}.bpf.o
    COMMAND ${ZERNEL_CLANG} ${ZERNEL_BPF_CFLAGS} -MD -MF ${out}/${name}.bpf.d
      -c ${src} -o ${out}/${name}.bpf.o
    DEPENDS ${src} ${ZERNEL_BPF_DIR}/vmlinux.h ${ZERNEL_BPF_DIR}/.libbpf.stamp
    DEPFILE ${out}/${name}.bpf.d
    COMMENT "Compiling BPF program ${file}"
    COMMAND_EXPAND_LISTS VERBATIM)
  # gen object links (and sanitises) the object as libbpf will load it; the skeleton embeds it.
  add_custom_command(OUTPUT ${out}/${name}.skel.h
    BYPRODUCTS ${out}/${name}.linked.o
    COMMAND ${ZERNEL_BPFTOOL} gen object ${out}/${name}.linked.o ${out}/${name}.bpf.o
    COMMAND sh -c "\"$0\" gen skeleton \"$1\" name \"$2\" > \"$3.tmp\" && mv \"$3.tmp\" \"$3\""
      ${ZERNEL_BPFTOOL} ${out}/${name}.linked.o ${name}_bpf ${out}/${name}.skel.h
    DEPENDS ${out}/${name}.bpf.o ${ZERNEL_BPF_DIR}/.bpftool.stamp
    COMMENT "Generating BPF skeleton ${name}.skel.h"
    VERBATIM)
  add_custom_target(${target}_gen DEPENDS ${out}/${name}.skel.h)
  add_dependencies(${target}_gen bpf-deps)
  add_library(${target} INTERFACE)
  # SYSTEM: the generated C must not trip the C++ targets' -Wold-style-cast -Werror.
  target_include_directories(${target} SYSTEM INTERFACE ${out})
  target_link_libraries(${target} INTERFACE zernel_libbpf)
  add_dependencies(${target} ${target}_gen)
endfunction()
