# Ingest cost of the KPM sums (issue 33; no broker, no store).
add_executable(bench-kpm bench-kpm.c)
target_link_libraries(bench-kpm PRIVATE fp_aggtest)
