// F32RouteSource: a WeightSource that hands every tensor out through get_f32 only
// (get_native falls back to it), the route the loader took before mapped views and
// native dtypes. The load tests and glm5_load_bench compare the fast route with it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/weight_source.h"

namespace tf::test {

class F32RouteSource final : public WeightSource {
 public:
  explicit F32RouteSource(const WeightSource& inner) : inner_(inner) {}
  Expected<Tensor> get_f32(const std::string& n, const Shape& s) const override { return inner_.get_f32(n, s); }
  bool has(const std::string& n) const override { return inner_.has(n); }
  Expected<Shape> shape(const std::string& n) const override { return inner_.shape(n); }
  std::vector<std::string> unknown_tensors() const override { return inner_.unknown_tensors(); }
  Expected<std::optional<Exl3Weight>> get_exl3(const std::string& n, int64_t in, int64_t out) const override {
    return inner_.get_exl3(n, in, out);
  }
  // FP8 matrices the loader keeps as their own bytes (the routed experts): as the inner
  // source hands them out (NoFp8Source below compares them with their dequantized route).
  Expected<std::optional<Matrix>> get_fp8(const std::string& n, const Shape& s) const override {
    return inner_.get_fp8(n, s);
  }

 private:
  const WeightSource& inner_;
};

// A source that never hands out FP8 bytes (get_fp8's default): an FP8 checkpoint's
// experts then load dequantized, the route before Fp8ExpertStack.
class NoFp8Source final : public WeightSource {
 public:
  explicit NoFp8Source(const WeightSource& inner) : inner_(inner) {}
  Expected<Tensor> get_f32(const std::string& n, const Shape& s) const override { return inner_.get_f32(n, s); }
  Expected<Tensor> get_native(const std::string& n, const Shape& s) const override { return inner_.get_native(n, s); }
  bool has(const std::string& n) const override { return inner_.has(n); }
  Expected<Shape> shape(const std::string& n) const override { return inner_.shape(n); }
  std::vector<std::string> unknown_tensors() const override { return inner_.unknown_tensors(); }
  Expected<std::optional<Exl3Weight>> get_exl3(const std::string& n, int64_t in, int64_t out) const override {
    return inner_.get_exl3(n, in, out);
  }

 private:
  const WeightSource& inner_;
};

}  // namespace tf::test
