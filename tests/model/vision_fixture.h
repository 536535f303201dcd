// The tiny-vision fixture (tests/data/model/tiny-vision, tools/reference/make_vision_fixtures.py)
// as the vision tower tests use it: config, weights, reference tensors and grids, plus
// the error measures the tests print. Header-only: shared by glm5_vision_test.cc (CPU)
// and glm5_vision_cuda_test.cc (GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/glm5/glm5_vision.h"
#include "model/safetensors.h"
#include "model/weight_source.h"

namespace tf::test {

// tests/data/model/<name>; TF_TEST_DATA_DIR in the environment wins (the GPU machine
// runs the binaries from another checkout path).
inline std::string model_fixture_dir(const std::string& name) {
  const char* env = std::getenv("TF_TEST_DATA_DIR");
  return std::string(env && *env ? env : TF_TEST_DATA_DIR) + "/model/" + name;
}

struct VisionFixture {
  std::string dir;
  Glm5Config config;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<SafetensorsFile> ref;

  // A reference tensor as packed f32 on the host.
  Tensor f32(const std::string& name) const {
    auto t = ref->tensor(name);
    EXPECT_TRUE(t.has_value()) << name << ": " << t.status().to_string();
    return t.has_value() ? t->to_f32() : Tensor();
  }
  // An i64 [3] grid row (t, h, w).
  VisionGrid grid(const std::string& name) const {
    auto t = ref->tensor(name);
    EXPECT_TRUE(t.has_value()) << name;
    if (!t.has_value() || t->numel() != 3) return {};
    const Tensor g = t->contiguous();
    const int64_t* p = g.data<int64_t>();
    return {p[0], p[1], p[2]};
  }
};

inline VisionFixture load_vision_fixture() {
  VisionFixture f;
  f.dir = model_fixture_dir("tiny-vision");
  auto cfg = load_glm5_config(f.dir);
  EXPECT_TRUE(cfg.has_value()) << cfg.status().to_string();
  if (cfg.has_value()) f.config = *cfg;
  auto ws = open_weight_source(f.dir, f.config);
  EXPECT_TRUE(ws.has_value()) << ws.status().to_string();
  if (ws.has_value()) f.weights = std::move(*ws);
  auto ref = SafetensorsFile::open(f.dir + "/reference.safetensors");
  EXPECT_TRUE(ref.has_value()) << ref.status().to_string();
  if (ref.has_value()) f.ref = std::move(*ref);
  return f;
}

// Rows of several packed 2-D host tensors of one width, one after the other.
inline Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  Tensor out = Tensor::empty({rows, parts.at(0).size(1)}, DType::kF32);
  int64_t at = 0;
  for (const Tensor& p : parts) {
    std::memcpy(out.data<float>() + at, p.data<float>(), p.nbytes());
    at += p.numel();
  }
  return out;
}

struct Deviation {
  double max_abs = 0, rel = 0;  // max|a - b| and max|a - b| / max|b|
};
inline Deviation deviation(const Tensor& got, const Tensor& ref) {
  const std::vector<float> a = got.to_vector(), b = ref.to_vector();
  Deviation d;
  double scale = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double e = std::isfinite(a[i]) ? std::fabs(static_cast<double>(a[i]) - b[i]) : INFINITY;
    d.max_abs = std::max(d.max_abs, e);
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  d.rel = scale > 0 ? d.max_abs / scale : d.max_abs;
  return d;
}

}  // namespace tf::test
