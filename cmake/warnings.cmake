# Warning and sanitizer flags for our own targets (never for third-party code).
set(TF_WARNING_FLAGS -Wall -Wextra -Wno-missing-field-initializers)
if(TF_WERROR)
  list(APPEND TF_WARNING_FLAGS -Werror)
endif()

if(TF_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# tf_target_defaults(target): warnings, include root, C++20.
function(tf_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TF_WARNING_FLAGS}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
endfunction()

# tf_library(name folder SOURCES ... DEPS ...): one library per source folder.
function(tf_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  tf_target_defaults(${name})
endfunction()

# tf_test(name SOURCES ... DEPS ... [LABELS ...]): a GoogleTest executable registered with CTest.
function(tf_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  tf_target_defaults(${name})
  target_compile_definitions(${name} PRIVATE TF_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
                                             TF_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}"
                       TIMEOUT ${ARG_TIMEOUT})
endfunction()
