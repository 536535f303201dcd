#include "core/logging.h"

#include <spdlog/sinks/basic_file_sink.h>

#include <cstdlib>
#include <mutex>

namespace tf {

void init_logging(int rank, const std::string& level) {
  std::string lv = level;
  if (lv.empty()) {
    const char* env = std::getenv("TF_LOG_LEVEL");
    lv = env ? env : "info";
  }
  // TF_LOG_FILE: the log also goes to that file (appended), e.g. a rank's own log on a worker.
  static std::once_flag file_sink;
  std::call_once(file_sink, [] {
    const char* path = std::getenv("TF_LOG_FILE");
    if (path == nullptr || *path == '\0') return;
    try {
      spdlog::default_logger()->sinks().push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(path));
    } catch (const spdlog::spdlog_ex& e) {
      spdlog::warn("TF_LOG_FILE={}: {} (logging to the console only)", path, e.what());
    }
  });
  spdlog::set_level(spdlog::level::from_str(lv));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [rank " + std::to_string(rank) + "] %^%l%$ %v");
}

}  // namespace tf
