#include "engine/load_progress.h"

#include <algorithm>

#include "core/logging.h"

namespace tf::engine {

ProgressWeightSource::ProgressWeightSource(const WeightSource& inner, int64_t total_bytes)
    : inner_(inner), total_(std::max<int64_t>(total_bytes, 1)), last_log_(std::chrono::steady_clock::now()) {}

Expected<Tensor> ProgressWeightSource::get_f32(const std::string& canonical_name, const Shape& expected_shape) const {
  Expected<Tensor> t = inner_.get_f32(canonical_name, expected_shape);
  if (!t.has_value()) return t;
  loaded_ += static_cast<int64_t>(t->nbytes());
  ++tensors_;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_log_ >= std::chrono::seconds(3)) {
    last_log_ = now;
    const double pct = std::min(100.0, 100.0 * static_cast<double>(loaded_) / static_cast<double>(total_));
    TF_LOG_INFO("loading weights: {:.0f}% ({:.2f} of ~{:.2f} GiB, {} tensors)", pct, loaded_ / 1073741824.0,
                total_ / 1073741824.0, tensors_);
  }
  return t;
}

}  // namespace tf::engine
