// ProgressWeightSource: wraps a WeightSource and logs how much of the checkpoint
// has been loaded (every few seconds and at the end), so a long load shows
// progress instead of silence. Thread-safe: the loader reads layers on several threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/weight_source.h"

namespace tf::engine {

class ProgressWeightSource final : public WeightSource {
 public:
  // `total_bytes`: the f32 bytes the load is expected to read (an estimate is fine;
  // get_native's tensors count as their f32 size, so the percentage stays comparable).
  ProgressWeightSource(const WeightSource& inner, int64_t total_bytes);

  Expected<Tensor> get_f32(const std::string& canonical_name, const Shape& expected_shape = {}) const override;
  Expected<Tensor> get_native(const std::string& canonical_name, const Shape& expected_shape = {}) const override;
  bool has(const std::string& canonical_name) const override { return inner_.has(canonical_name); }
  Expected<Shape> shape(const std::string& canonical_name) const override { return inner_.shape(canonical_name); }
  std::vector<std::string> unknown_tensors() const override { return inner_.unknown_tensors(); }
  // EXL3 tensors stay quantized (counted as loaded only through get_f32's tensors).
  Expected<std::optional<Exl3Weight>> get_exl3(const std::string& name, int64_t in_features,
                                               int64_t out_features) const override {
    return inner_.get_exl3(name, in_features, out_features);
  }

  // FP8 matrices kept as their bytes (the release's routed experts): counted at their f32 size too.
  Expected<std::optional<Matrix>> get_fp8(const std::string& name, const Shape& expected_shape) const override;

  int64_t loaded_bytes() const { return loaded_; }
  int64_t tensors() const { return tensors_; }

 private:
  Expected<Tensor> counted(Expected<Tensor> t) const;
  void count(int64_t elements) const;  // adds elements' f32 bytes, logs every few seconds

  const WeightSource& inner_;
  int64_t total_;
  mutable std::atomic<int64_t> loaded_{0}, tensors_{0};
  mutable std::mutex log_mu_;
  mutable std::chrono::steady_clock::time_point last_log_;
};

}  // namespace tf::engine
