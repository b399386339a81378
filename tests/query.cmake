# The aggregator's query layer (aggregator/query: fp_query).
if(TARGET fp_query)
  fp_test(test-query LABELS query LIBS fp_query)
endif()
if(TARGET fp_query)
  fp_test(test-query-diff LABELS query LIBS fp_query m)
endif()
