# Issue 4 hook tests: allocation, lock and I/O workloads (tests/programs/alloc_*, lock_*,
# io_*) run under LD_PRELOAD=libfleetprof.so, chunks read back through the codec. Sanitizer
# runtimes interpose malloc and pthread themselves (and a sanitized .so cannot be preloaded),
# so these run in the plain build only.
if(FLEETPROF_SANITIZE STREQUAL "")
  enable_language(CXX)
  foreach(p alloc_work alloc_own lock_work io_work)
    add_executable(${p} programs/${p}.c)
    target_compile_options(${p} PRIVATE -O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
      -fno-optimize-sibling-calls -Wno-shadow)
    target_link_libraries(${p} PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  endforeach()
  add_executable(alloc_cxx programs/alloc_cxx.cc)
  target_compile_options(alloc_cxx PRIVATE -O1 -fno-omit-frame-pointer -fno-optimize-sibling-calls)
  foreach(t alloc lock io)
    fp_test(test-agent-${t} LABELS "agent;hooks" LIBS m)
    add_dependencies(test-agent-${t} fleetprof_agent fleetprof alloc_work alloc_own alloc_cxx
      lock_work io_work)
  endforeach()
endif()
