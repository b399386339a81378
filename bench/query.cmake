# The query layer's benchmark (bench-query.c): merged profile and diff latency.
if(TARGET fp_query)
  add_executable(bench-query bench-query.c)
  target_link_libraries(bench-query PRIVATE fp_query m)
  # the diff's sensitivity curve on simulated sample streams (issue 30)
  add_executable(bench-diff-power bench-diff-power.c)
  target_link_libraries(bench-diff-power PRIVATE fp_query m)
  # the open-loop service of the pipeline cells (bench/diff-pipeline.sh): -O2, no frame pointers
  add_executable(diff-service diff-service.c)
  target_compile_options(diff-service PRIVATE -O2 -g -fomit-frame-pointer -fno-ipa-icf)
  target_link_libraries(diff-service PRIVATE m)
endif()
