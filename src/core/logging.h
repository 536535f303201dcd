// Logging through spdlog. One process-wide logger; rank-aware prefix so that
// logs of several tensor-parallel ranks can be told apart.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace tf {

// Level from TF_LOG_LEVEL (trace, debug, info, warn, error) unless given; with
// TF_LOG_FILE set, the log is also appended to that file.
void init_logging(int rank = 0, const std::string& level = "");

}  // namespace tf

#define TF_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define TF_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define TF_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define TF_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
