// MLA sparse attention in the absorbed form over a paged latent cache, and the
// store of new latents into it (f32, bf16 or fp8 e4m3 with a per-token scale).
#include <cmath>
#include <limits>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

// Decodes cached token `tok` into dst[width].
void load_latent(const LatentPagesView& c, int64_t tok, float* dst) {
  const int64_t page = c.page_table[tok / c.page_size], slot = tok % c.page_size;
  const int64_t off = page * c.page_stride + slot * c.width;
  switch (c.dtype) {
    case DType::kF32:
      std::copy_n(static_cast<const float*>(c.pages) + off, c.width, dst);
      break;
    case DType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(c.pages) + off;
      for (int64_t i = 0; i < c.width; ++i) dst[i] = bf16_to_float(p[i]);
      break;
    }
    case DType::kF8E4M3: {
      const uint8_t* p = static_cast<const uint8_t*>(c.pages) + off;
      const float s = c.scales[page * c.page_size + slot];
      for (int64_t i = 0; i < c.width; ++i) dst[i] = fp8_e4m3_to_float(p[i]) * s;
      break;
    }
    default:
      throw StatusError(unimplemented(std::string("latent cache dtype ") + dtype_name(c.dtype)));
  }
}

}  // namespace

void latent_store(const LatentPagesView& c, void* pages, float* scales, const Tensor& latent, int64_t first) {
  check_f32("latent_store latent", latent);
  const int64_t r = c.width, t = latent.numel() / r;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t tok = first + i;
    const int64_t page = c.page_table[tok / c.page_size], slot = tok % c.page_size;
    const int64_t off = page * c.page_stride + slot * r;
    const float* src = latent.data<float>() + i * r;
    switch (c.dtype) {
      case DType::kF32:
        std::copy_n(src, r, static_cast<float*>(pages) + off);
        break;
      case DType::kBF16:
        for (int64_t j = 0; j < r; ++j) static_cast<uint16_t*>(pages)[off + j] = float_to_bf16(src[j]);
        break;
      case DType::kF8E4M3: {
        // One scale per token maps its largest magnitude to the fp8 maximum (448).
        float amax = 0;
        for (int64_t j = 0; j < r; ++j) amax = std::max(amax, std::fabs(src[j]));
        const float s = amax > 0 ? amax / 448.0f : 1.0f;
        scales[page * c.page_size + slot] = s;
        for (int64_t j = 0; j < r; ++j) static_cast<uint8_t*>(pages)[off + j] = float_to_fp8_e4m3(src[j] / s);
        break;
      }
      default:
        throw StatusError(unimplemented(std::string("latent cache dtype ") + dtype_name(c.dtype)));
    }
  }
}

void mla_sparse_attention(Tensor& out, const Tensor& q, const LatentPagesView& cache, const Tensor& indices,
                          float scale) {
  check_f32("mla_sparse_attention q", q);
  check_i32("mla_sparse_attention indices", indices);
  const int64_t r = cache.width, w = indices.size(-1), t = indices.numel() / w, h = q.numel() / (t * r);
  check_f32("mla_sparse_attention out", out, t * h * r);
  parallel_rows(t, w * h * r * 2, [&](int64_t tb, int64_t te) {
    std::vector<float> lat, scores;
    std::vector<int32_t> toks;
    for (int64_t ti = tb; ti < te; ++ti) {
      // The selected, in-range tokens of this query, each once, in index order.
      toks.clear();
      const int32_t* idx = indices.data<int32_t>() + ti * w;
      for (int64_t j = 0; j < w; ++j)
        if (idx[j] >= 0 && idx[j] < cache.num_tokens) toks.push_back(idx[j]);
      std::sort(toks.begin(), toks.end());
      toks.erase(std::unique(toks.begin(), toks.end()), toks.end());
      const int64_t n = static_cast<int64_t>(toks.size());
      lat.resize(n * r);
      for (int64_t j = 0; j < n; ++j) load_latent(cache, toks[j], &lat[j * r]);
      scores.resize(n);
      for (int64_t hh = 0; hh < h; ++hh) {
        const float* qh = q.data<float>() + (ti * h + hh) * r;
        float* o = out.data<float>() + (ti * h + hh) * r;
        std::fill(o, o + r, 0.0f);
        if (n == 0) continue;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          float acc = 0;
          for (int64_t x = 0; x < r; ++x) acc += qh[x] * lat[j * r + x];
          scores[j] = acc * scale;
          mx = std::max(mx, scores[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
        for (int64_t j = 0; j < n; ++j) {
          const float p = scores[j] / sum;
          for (int64_t x = 0; x < r; ++x) o[x] += p * lat[j * r + x];
        }
      }
    }
  });
}

}  // namespace tf::cpu
