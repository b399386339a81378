# Symbolization (issue 15): test programs and the tests of every symbol source.
# symwork: static functions in a PIE without -rdynamic; derived files next to it:
#   symwork.debug     the separate debug file (objcopy --only-keep-debug)
#   symwork.stripped  no symbols at all (only the debug file, elsewhere, can name it)
#   symwork.linked    stripped + .gnu_debuglink to symwork.debug
#   symwork.mini      stripped + MiniDebugInfo (.gnu_debugdata: xz of a symtab-only ELF)
add_executable(symwork programs/symwork.c)
target_compile_options(symwork PRIVATE -O1 -g -fno-omit-frame-pointer -fno-inline)
find_program(OBJCOPY objcopy REQUIRED)
find_program(XZ xz REQUIRED)
find_program(NM nm REQUIRED)
add_custom_command(TARGET symwork POST_BUILD
  COMMAND ${OBJCOPY} --only-keep-debug $<TARGET_FILE:symwork> symwork.debug
  COMMAND ${OBJCOPY} --strip-all $<TARGET_FILE:symwork> symwork.stripped
  COMMAND ${OBJCOPY} --strip-all --add-gnu-debuglink=symwork.debug $<TARGET_FILE:symwork> symwork.linked
  COMMAND sh -c "${NM} -D --format=posix --defined-only symwork | awk '{print $1}' | sort > symwork.dynsyms && ${NM} --format=posix --defined-only symwork | awk '$2 ~ /^[Tt]$/ {print $1}' | sort > symwork.funcsyms && comm -13 symwork.dynsyms symwork.funcsyms > symwork.keep && ${OBJCOPY} -S --remove-section .gdb_index --remove-section .comment --keep-symbols=symwork.keep symwork.debug symwork.minidebug && rm -f symwork.minidebug.xz && ${XZ} -k symwork.minidebug && ${OBJCOPY} --add-section .gnu_debugdata=symwork.minidebug.xz symwork.stripped symwork.mini"
  WORKING_DIRECTORY $<TARGET_FILE_DIR:symwork>
  VERBATIM)

# Source lines and inlined frames: -O2 with always_inline helpers; the server names the
# stripped copy from symwork_inl.debug (served by debuginfod) down to the line.
add_executable(symwork_inl programs/symwork_inl.c)
target_compile_options(symwork_inl PRIVATE -O2 -g -fno-omit-frame-pointer)
add_custom_command(TARGET symwork_inl POST_BUILD
  COMMAND ${OBJCOPY} --only-keep-debug $<TARGET_FILE:symwork_inl> symwork_inl.debug
  COMMAND ${OBJCOPY} --strip-all $<TARGET_FILE:symwork_inl> symwork_inl.stripped
  WORKING_DIRECTORY $<TARGET_FILE_DIR:symwork_inl>
  VERBATIM)

# C++ with a demangled name longer than 1,000 bytes.
add_executable(symwork_cxx programs/symwork_cxx.cc)
target_compile_options(symwork_cxx PRIVATE -O2 -g -fno-omit-frame-pointer)

# Rust, legacy and v0 mangling (rustc offline: no crates). rustc comes from rustup on the
# project's machines (~/.cargo/bin) or Debian's rustc package.
find_program(RUSTC rustc HINTS $ENV{HOME}/.cargo/bin)
if(RUSTC)
  foreach(m legacy v0)
    if(m STREQUAL "v0")
      set(rflags -C symbol-mangling-version=v0)
    else()
      set(rflags "")
    endif()
    add_custom_command(OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/symwork_rust_${m}
      COMMAND ${RUSTC} -O -g -C force-frame-pointers=yes ${rflags}
              ${CMAKE_CURRENT_SOURCE_DIR}/programs/symwork_rust.rs -o symwork_rust_${m}
      DEPENDS programs/symwork_rust.rs
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    list(APPEND rust_outputs ${CMAKE_CURRENT_BINARY_DIR}/symwork_rust_${m})
  endforeach()
  add_custom_target(symwork_rust ALL DEPENDS ${rust_outputs})
endif()

# Agent-side sources (no Kafka). nosan: the agent is preloaded into uninstrumented programs.
fp_test(test-symbols LABELS "agent;symbols;nosan" LIBS m)
add_dependencies(test-symbols symwork symwork_cxx fleetprof fleetprof_agent)
if(RUSTC)
  add_dependencies(test-symbols symwork_rust)
endif()

# The symbolizer against a stub debuginfod of its own (oversized files, 300,000 nested DIEs,
# a slow download, the cache bound): no Kafka, no real debuginfod, about 5 s.
if(TARGET fp_aggtest)
  fp_test(test-symbolizer LABELS "symbols" LIBS fp_aggtest)
endif()

# Server side: debuginfod (deploy/debuginfod on port 19830) -> aggregator -> CLI, go tool
# pprof. Kafka on 19820, HTTP 19821. It measures no CPU or rate (its agents' samples are only
# named), so it may overlap other tests (label overlaps: not RUN_SERIAL).
if(TARGET fp_aggtest)
  fp_test(test-symbols-server LABELS "api;symbols;kafka;nosan;overlaps" LIBS fp_aggtest)
  set_tests_properties(test-symbols-server PROPERTIES FIXTURES_REQUIRED go-pprof)
  add_dependencies(test-symbols-server symwork symwork_inl fleetprof-aggregator fleetprof
                   fleetprof_agent)
endif()
