# Every dependency comes from a Debian package (see DEPENDENCIES.md and scripts/deps.sh).
find_package(Threads REQUIRED)
find_package(GTest REQUIRED)
include(GoogleTest)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(benchmark QUIET)

# cpp-httplib: header-only in Debian; its CMake package may be absent on some images.
find_package(httplib QUIET)
if(NOT TARGET httplib::httplib)
  find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
  add_library(httplib::httplib INTERFACE IMPORTED)
  target_include_directories(httplib::httplib INTERFACE ${HTTPLIB_INCLUDE_DIR})
endif()

# Gloo (CPU collectives between processes). Debian ships a CMake package.
find_package(Gloo QUIET)
if(TARGET gloo)
  set(TF_HAVE_GLOO ON)
else()
  message(STATUS "Gloo not found: the CPU multi-process communicator is not built")
  set(TF_HAVE_GLOO OFF)
endif()
