// The bidirectional-encoder ops (the vision tower's: add_bias, gelu, rotary,
// segment_attention; kernels/cuda/cuda_vision.cu) against the CPU reference over
// awkward shapes: odd widths, head dims 6 / 12 / 16 / 64 / 80 / 128 (every kernel
// instance, padded columns), one-row, empty and long segments (longer than a key
// tile and a query tile), in place and out of place. Tolerances (max|Δ| relative to
// the largest reference magnitude, floor 1): add_bias exact, gelu / rotary 1e-6 (erff,
// FMA contraction), segment_attention 1e-5 (online softmax, other summation order) on
// the scalar kernel; the tensor-core kernel of D = 64 in its default form (q, k, P, v
// rounded to bf16, as the reference's bf16 attention: 2^-9 relative per operand) 2e-2, in
// its split form (TF_SEGMENT_ATTENTION_MMA=split: q K^T on fp16 hi + lo pairs, P V on bf16
// pairs, ~2^-16 relative; measured <= 6.6e-6 on the H200) 2e-5. The D = 64 cases run all
// three kernels (TF_SEGMENT_ATTENTION_MMA=0 selects the scalar one) over T = 1, 63, 64,
// 65, 1000, 5000 with 1 and 16 heads. segment_attention's segments must also be
// independent on the GPU bit for bit (a segment alone gives the rows it gets among
// others), on every kernel. Part of cuda_ops_parity_tests (label gpu): runs on the GPU
// machine; prints "[parity] <op> ..." lines (and the time of each kernel at the
// release's largest image).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

// TF_SEGMENT_ATTENTION_MMA set to `value` (nullptr: unset) for the scope; the op reads it at each call.
class AttentionPath {
 public:
  explicit AttentionPath(const char* value) {
    const char* old = std::getenv(kVar);
    had_ = old != nullptr;
    if (had_) saved_ = old;
    if (value != nullptr)
      setenv(kVar, value, 1);
    else
      unsetenv(kVar);
  }
  ~AttentionPath() {
    if (had_)
      setenv(kVar, saved_.c_str(), 1);
    else
      unsetenv(kVar);
  }
  AttentionPath(const AttentionPath&) = delete;
  AttentionPath& operator=(const AttentionPath&) = delete;

 private:
  static constexpr const char* kVar = "TF_SEGMENT_ATTENTION_MMA";
  bool had_ = false;
  std::string saved_;
};

constexpr double kScalarTol = 1e-5;  // the scalar kernel (f32 throughout)
constexpr double kSplitTol = 2e-5;   // the tensor-core kernel's split form (D = 64)
constexpr double kBf16Tol = 2e-2;    // the tensor-core kernel in bf16 (D = 64, the default)

// The kernels of D = 64: TF_SEGMENT_ATTENTION_MMA's value (nullptr: unset, the default), the
// name printed and the tolerance.
struct Form {
  const char* env;
  const char* name;
  double tol;
};
constexpr Form kForms[] = {
    {nullptr, "mma bf16", kBf16Tol}, {"split", "mma split", kSplitTol}, {"0", "scalar", kScalarTol}};

class VisionParity : public CpuCudaTest {
 protected:
  void expect_close(const std::string& what, const Tensor& ref, const Tensor& dev, double tol) {
    ASSERT_EQ(ref.shape(), dev.shape()) << what;
    const double e = parity_rel_err(ref, down(dev));
    std::printf("[parity] %-44s max rel err %.3g (tol %.0e)\n", what.c_str(), e, tol);
    EXPECT_LE(e, tol) << what;
  }
};

TEST_F(VisionParity, AddBias) {
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{1, 1}, {3, 13}, {129, 1024}, {4099, 96}}) {
    const Tensor x = randn({rows, d}, 1), bias = randn({d}, 2);
    Tensor ref = Tensor::empty({rows, d}, DType::kF32);
    cpu_->add_bias(ref, x, bias);
    Tensor dx = up(x);
    gpu_->add_bias(dx, dx, up(bias));  // in place
    expect_close("add_bias " + std::to_string(rows) + "x" + std::to_string(d), ref, dx, 0.0);
  }
  Tensor bad = gpu_->empty({3, 12});
  EXPECT_THROW(gpu_->add_bias(bad, bad, up(randn({13}, 3))), StatusError);
}

TEST_F(VisionParity, Gelu) {
  for (int64_t n : {int64_t{1}, int64_t{257}, int64_t{100003}}) {
    const Tensor x = randn({n}, 4, 3.0f);
    Tensor ref = Tensor::empty({n}, DType::kF32);
    cpu_->gelu(ref, x);
    Tensor out = gpu_->empty({n});
    gpu_->gelu(out, up(x));
    expect_close("gelu n=" + std::to_string(n), ref, out, 1e-6);
  }
}

TEST_F(VisionParity, Rotary) {
  for (auto [t, h, d] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 2}, {5, 3, 6}, {97, 16, 64}, {33, 4, 16}}) {
    const Tensor x = randn({t, h, d}, 5), cos = randn({t, d}, 6), sin = randn({t, d}, 7);
    Tensor ref = Tensor::empty({t, h, d}, DType::kF32);
    cpu_->rotary(ref, x, cos, sin);
    const Tensor dcos = up(cos), dsin = up(sin);
    Tensor out = gpu_->empty({t, h, d});
    gpu_->rotary(out, up(x), dcos, dsin);
    Tensor inplace = up(x);
    gpu_->rotary(inplace, inplace, dcos, dsin);
    const std::string tag = " T=" + std::to_string(t) + " H=" + std::to_string(h) + " D=" + std::to_string(d);
    expect_close("rotary" + tag, ref, out, 1e-6);
    expect_close("rotary in place" + tag, ref, inplace, 1e-6);
  }
}

TEST_F(VisionParity, SegmentAttention) {
  struct Case {
    std::vector<int32_t> offsets;
    int64_t heads, d;
  };
  const std::vector<Case> cases = {
      {{0, 1}, 1, 16},                 // one row
      {{0, 1, 130, 130, 300}, 4, 12},  // a one-row, a tile-crossing and an empty segment
      {{0, 80, 160, 256}, 4, 16},      // the tiny tower's shapes
      {{0, 300, 301, 1000}, 3, 64},    // the release's head dim
      {{0, 5000}, 2, 64},              // one long segment (many key and query tiles)
      {{0, 77, 200}, 2, 6},            // a head dim below 16, odd
      {{0, 129, 260}, 2, 80},          // padded 128-column instance
      {{0, 64, 200}, 2, 128},
      {{0, 0, 50, 50}, 1, 32},  // empty first and last segments
  };
  for (const Case& c : cases) {
    const int64_t t = c.offsets.back();
    const Tensor q = randn({t, c.heads, c.d}, 8, 0.5f), k = randn({t, c.heads, c.d}, 9, 0.5f),
                 v = randn({t, c.heads, c.d}, 10);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    const Tensor off = i32_tensor(c.offsets);
    Tensor ref = Tensor::empty({t, c.heads, c.d}, DType::kF32);
    cpu_->segment_attention(ref, q, k, v, off, scale);
    Tensor out = gpu_->empty({t, c.heads, c.d});
    gpu_->segment_attention(out, up(q), up(k), up(v), up(off), scale);
    std::string tag = " T=" + std::to_string(t) + " H=" + std::to_string(c.heads) +
                      " D=" + std::to_string(c.d) + " S=" + std::to_string(c.offsets.size() - 1);
    expect_close("segment_attention" + tag, ref, out, c.d == 64 ? kBf16Tol : kScalarTol);
  }
}

TEST_F(VisionParity, SegmentAttentionHeadDim64BothKernels) {
  // The tensor-core kernel's shapes: query tiles of 64 rows and key tiles of 64 keys,
  // full, partial and one-row; one-row, empty and uneven segments; q, k of std 0.5
  // (soft attention) and 2 (logits up to ~20: sharp).
  struct Case {
    std::vector<int32_t> offsets;
    float qk_std;
  };
  const std::vector<Case> cases = {
      {{0, 1}, 0.5f},
      {{0, 63}, 0.5f},
      {{0, 64}, 0.5f},
      {{0, 65}, 0.5f},
      {{0, 1, 65}, 0.5f},
      {{0, 1, 2, 66, 130, 130, 131, 600, 1000}, 0.5f},
      {{0, 1, 2, 66, 130, 130, 131, 600, 1000}, 2.0f},
      {{0, 4001, 4002, 5000}, 0.5f},
  };
  for (const Case& c : cases) {
    for (int64_t heads : {int64_t{1}, int64_t{16}}) {
      const int64_t t = c.offsets.back(), d = 64;
      const Tensor q = randn({t, heads, d}, 17, c.qk_std), k = randn({t, heads, d}, 18, c.qk_std),
                   v = randn({t, heads, d}, 19);
      const Tensor off = i32_tensor(c.offsets);
      Tensor ref = Tensor::empty({t, heads, d}, DType::kF32);
      cpu_->segment_attention(ref, q, k, v, off, 0.125f);
      const Tensor dq = up(q), dk = up(k), dv = up(v), doff = up(off);
      const std::string tag = " T=" + std::to_string(t) + " H=" + std::to_string(heads) +
                              " S=" + std::to_string(c.offsets.size() - 1) +
                              (c.qk_std > 1.0f ? " sharp" : "");
      for (const Form& f : kForms) {
        const AttentionPath env(f.env);
        Tensor out = gpu_->empty({t, heads, d});
        gpu_->segment_attention(out, dq, dk, dv, doff, 0.125f);
        expect_close(std::string("segment_attention ") + f.name + tag, ref, out, f.tol);
      }
    }
  }
}

TEST_F(VisionParity, SegmentAttentionSegmentsAreIndependent) {
  // Segments [0, 90), [90, 300), [300, 301): each alone gives, bit for bit, its rows of the joint call.
  const std::vector<int32_t> offsets = {0, 90, 300, 301};
  const int64_t t = 301, h = 4, d = 64;
  const Tensor q = randn({t, h, d}, 11), k = randn({t, h, d}, 12), v = randn({t, h, d}, 13);
  for (const Form& f : kForms) {
    const AttentionPath env(f.env);
    Tensor joint = gpu_->empty({t, h, d});
    gpu_->segment_attention(joint, up(q), up(k), up(v), up(i32_tensor(offsets)), 0.125f);
    const Tensor hj = down(joint);
    for (size_t s = 0; s + 1 < offsets.size(); ++s) {
      const int64_t r0 = offsets[s], r1 = offsets[s + 1], n = r1 - r0;
      auto part = [&](const Tensor& x) { return up(x.slice(0, r0, r1).contiguous()); };
      Tensor alone = gpu_->empty({n, h, d});
      gpu_->segment_attention(alone, part(q), part(k), part(v), up(i32_tensor({0, static_cast<int32_t>(n)})),
                              0.125f);
      EXPECT_TRUE(same_bits(down(alone), hj.slice(0, r0, r1).contiguous()))
          << "segment " << s << " (" << f.name << ")";
    }
  }
}

TEST_F(VisionParity, SegmentAttentionTiming) {
  // The release's largest image (about 32k patches, one segment), 16 heads of 64: one
  // call of each kernel timed after a warm-up, for the log (no bound).
  const int64_t t = 32400, h = 16, d = 64;
  const Tensor q = up(randn({t, h, d}, 14, 0.5f)), k = up(randn({t, h, d}, 15, 0.5f)),
               v = up(randn({t, h, d}, 16));
  const Tensor off = up(i32_tensor({0, static_cast<int32_t>(t)}));
  Tensor out = gpu_->empty({t, h, d});
  for (const Form& p : kForms) {
    const AttentionPath env(p.env);
    gpu_->segment_attention(out, q, k, v, off, 0.125f);
    down(out.slice(0, 0, 1));  // synchronise
    const auto t0 = std::chrono::steady_clock::now();
    gpu_->segment_attention(out, q, k, v, off, 0.125f);
    const Tensor row = down(out.slice(0, 0, 1));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double tflops = 4.0 * t * t * h * d / (ms * 1e-3) / 1e12;
    std::printf("[parity] segment_attention T=%lld H=%lld D=%lld (%s): %.1f ms (%.1f TFLOP/s)\n",
                static_cast<long long>(t), static_cast<long long>(h), static_cast<long long>(d), p.name, ms,
                tflops);
    for (int64_t i = 0; i < row.numel(); ++i) EXPECT_TRUE(std::isfinite(row.data<float>()[i]));
  }
}

}  // namespace
}  // namespace tf
