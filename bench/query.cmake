# The query layer's benchmark (bench-query.c): merged profile and diff latency.
if(TARGET fp_query)
  add_executable(bench-query bench-query.c)
  target_link_libraries(bench-query PRIVATE fp_query m)
  # the diff's sensitivity curve on simulated sample streams (issue 30)
  add_executable(bench-diff-power bench-diff-power.c)
  target_link_libraries(bench-diff-power PRIVATE fp_query m)
endif()
