# How the code reads: no production function over 150 lines (tests/funclen.sh,
# universal-ctags).
add_test(NAME test-funclen COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/funclen.sh ${PROJECT_SOURCE_DIR} 150)
set_tests_properties(test-funclen PROPERTIES LABELS "docs;nosan" TIMEOUT 60)
# No folder of production code over 20 files (tests/folders.sh).
add_test(NAME test-folders COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/folders.sh ${PROJECT_SOURCE_DIR} 20)
set_tests_properties(test-folders PROPERTIES LABELS "docs;nosan" TIMEOUT 60)
