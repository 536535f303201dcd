# Every dependency comes from a Debian package (see DEPENDENCIES.md and scripts/deps.sh).
find_package(Threads REQUIRED)
find_package(GTest REQUIRED)
include(GoogleTest)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(benchmark QUIET)

# cpp-httplib: Debian ships a compiled library (libcpp-httplib.so) whose header must be
# used with the CPPHTTPLIB_* defines it was built with; pkg-config gives both.
pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

# Gloo (CPU collectives between processes). Debian ships a CMake package.
find_package(Gloo QUIET)
if(TARGET gloo)
  set(TF_HAVE_GLOO ON)
else()
  message(STATUS "Gloo not found: the CPU multi-process communicator is not built")
  set(TF_HAVE_GLOO OFF)
endif()
