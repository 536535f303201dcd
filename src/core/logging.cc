#include "core/logging.h"

#include <cstdlib>

namespace tf {

void init_logging(int rank, const std::string& level) {
  std::string lv = level;
  if (lv.empty()) {
    const char* env = std::getenv("TF_LOG_LEVEL");
    lv = env ? env : "info";
  }
  spdlog::set_level(spdlog::level::from_str(lv));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [rank " + std::to_string(rank) + "] %^%l%$ %v");
}

}  // namespace tf
