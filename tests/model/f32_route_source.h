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

 private:
  const WeightSource& inner_;
};

}  // namespace tf::test
