#include "engine/load_progress.h"

#include <algorithm>

#include "core/logging.h"

namespace tf::engine {

ProgressWeightSource::ProgressWeightSource(const WeightSource& inner, int64_t total_bytes)
    : inner_(inner), total_(std::max<int64_t>(total_bytes, 1)), last_log_(std::chrono::steady_clock::now()) {}

Expected<Tensor> ProgressWeightSource::get_f32(const std::string& canonical_name, const Shape& expected_shape) const {
  return counted(inner_.get_f32(canonical_name, expected_shape));
}

Expected<Tensor> ProgressWeightSource::get_native(const std::string& canonical_name,
                                                  const Shape& expected_shape) const {
  return counted(inner_.get_native(canonical_name, expected_shape));
}

Expected<std::optional<Matrix>> ProgressWeightSource::get_fp8(const std::string& name,
                                                               const Shape& expected_shape) const {
  Expected<std::optional<Matrix>> m = inner_.get_fp8(name, expected_shape);
  if (m.has_value() && m->has_value()) count((*m)->size(0) * (*m)->size(1));
  return m;
}

Expected<Tensor> ProgressWeightSource::counted(Expected<Tensor> t) const {
  if (t.has_value()) count(t->numel());
  return t;
}

void ProgressWeightSource::count(int64_t elements) const {
  const int64_t loaded = loaded_ += elements * 4;
  const int64_t tensors = ++tensors_;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(log_mu_);
  if (now - last_log_ >= std::chrono::seconds(3)) {
    last_log_ = now;
    const double pct = std::min(100.0, 100.0 * static_cast<double>(loaded) / static_cast<double>(total_));
    TF_LOG_INFO("loading weights: {:.0f}% ({:.2f} of ~{:.2f} GiB, {} tensors)", pct, loaded / 1073741824.0,
                total_ / 1073741824.0, tensors);
  }
}

}  // namespace tf::engine
