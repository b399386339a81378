# The aggregator's query layer (aggregator/query: fp_query).
if(TARGET fp_query)
  fp_test(test-query LABELS query LIBS fp_query)
endif()
