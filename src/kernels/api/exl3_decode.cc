// EXL3 tile decoding (see exl3_decode.h for the bit-level format).
#include "kernels/api/exl3_decode.h"

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace tf {
namespace {

// fn(begin, end) over [0, n) on the global pool, in chunks worth ~32k operations of `cost` each.
void parallel_rows(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t per_item = cost < 1 ? 1 : cost;
  ThreadPool::global().parallel_for(n, fn, per_item >= 32768 ? 1 : (32768 + per_item - 1) / per_item);
}

constexpr int64_t kBlock = kExl3Hadamard;
constexpr float kHadamardNorm = 0.08838834764831845f;  // 1/sqrt(128)

uint16_t inst_value(uint32_t x) {
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  const float lo = f16_to_float(static_cast<uint16_t>(x & 0xFFFFu));
  const float hi = f16_to_float(static_cast<uint16_t>(x >> 16));
  return float_to_f16(lo + hi);  // exact sum, one rounding
}

using Table = std::array<uint16_t, 65536>;

Table build_table(Exl3Codebook cb) {
  Table t{};
  for (uint32_t s = 0; s < 65536; ++s) t[s] = exl3_state_value(static_cast<uint16_t>(s), cb);
  return t;
}

// The tile's words as the u32 stream (t[2w] is the low half of word w).
void stream_words(const int16_t* words, int bits, uint32_t* u) {
  for (int w = 0; w < 8 * bits; ++w) {
    u[w] = static_cast<uint32_t>(static_cast<uint16_t>(words[2 * w])) |
           static_cast<uint32_t>(static_cast<uint16_t>(words[2 * w + 1])) << 16;
  }
}

// Hadamard along dim 0 of `rows` rows (a multiple of 128) of `cols` contiguous values each,
// `pitch` values apart: butterflies between whole rows, so the inner loop runs over
// contiguous columns. One column of stride s is (rows, 1, s); a row-major matrix (rows, cols, cols).
void fwht128_rows(float* m, int64_t rows, int64_t cols, int64_t pitch) {
  for (int64_t b = 0; b < rows; b += kBlock) {
    float* blk = m + b * pitch;
    for (int64_t h = 1; h < kBlock; h *= 2) {
      for (int64_t i = 0; i < kBlock; i += 2 * h) {
        for (int64_t r = i; r < i + h; ++r) {
          float* a = blk + r * pitch;
          float* c = blk + (r + h) * pitch;
          for (int64_t j = 0; j < cols; ++j) {
            const float u = a[j], v = c[j];
            a[j] = u + v;
            c[j] = u - v;
          }
        }
      }
    }
    for (int64_t r = 0; r < kBlock; ++r)
      for (int64_t j = 0; j < cols; ++j) blk[r * pitch + j] *= kHadamardNorm;
  }
}

}  // namespace

void require_host_exl3(const Exl3Weight& w, const std::string& name) {
  Status s = check_exl3_weight(w, name);
  if (!s.is_ok()) throw StatusError(s);
  if (!w.trellis.device().is_cpu()) throw StatusError(invalid_argument(name + ": trellis is not on the host"));
}

uint16_t exl3_state_value(uint16_t state, Exl3Codebook cb) {
  uint32_t x = state;
  switch (cb) {
    case Exl3Codebook::k3Inst:
      return inst_value(x * 89226354u + 64248484u);
    case Exl3Codebook::kMcg:
      return inst_value(x * kExl3McgMultiplier);
    case Exl3Codebook::kMul1: {
      x *= kExl3Mul1Multiplier;
      const uint32_t s = (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24);
      // h(0x6400 + s) = 1024 + s exactly; the fma is exact in f32, so the only
      // rounding is the final one to fp16, as in the GPU's __hfma.
      const float v = std::fma(f16_to_float(static_cast<uint16_t>(0x6400u + s)), f16_to_float(0x1EEE),
                               f16_to_float(0xC931));
      return float_to_f16(v);
    }
  }
  return 0;
}

const uint16_t* exl3_codebook_table(Exl3Codebook cb) {
  static const Table k3inst = build_table(Exl3Codebook::k3Inst);
  static const Table kmcg = build_table(Exl3Codebook::kMcg);
  static const Table kmul1 = build_table(Exl3Codebook::kMul1);
  switch (cb) {
    case Exl3Codebook::k3Inst: return k3inst.data();
    case Exl3Codebook::kMcg: return kmcg.data();
    case Exl3Codebook::kMul1: return kmul1.data();
  }
  return kmcg.data();
}

const float* exl3_codebook_table_f32(Exl3Codebook cb) {
  using FloatTable = std::array<float, 65536>;
  auto build = [](Exl3Codebook c) {
    auto t = std::make_unique<FloatTable>();
    const uint16_t* h = exl3_codebook_table(c);
    for (size_t s = 0; s < t->size(); ++s) (*t)[s] = f16_to_float(h[s]);
    return t;
  };
  static const std::unique_ptr<FloatTable> k3inst = build(Exl3Codebook::k3Inst);
  static const std::unique_ptr<FloatTable> kmcg = build(Exl3Codebook::kMcg);
  static const std::unique_ptr<FloatTable> kmul1 = build(Exl3Codebook::kMul1);
  switch (cb) {
    case Exl3Codebook::k3Inst: return k3inst->data();
    case Exl3Codebook::kMcg: return kmcg->data();
    case Exl3Codebook::kMul1: return kmul1->data();
  }
  return kmcg->data();
}

Exl3TilePos exl3_tile_position(int p) {
  const int lane = p / 8, j = p % 8;
  return {2 * (lane % 4) + (j & 1) + 8 * ((j >> 1) & 1), lane / 4 + 8 * (j >> 2)};
}

void exl3_tile_states(const int16_t* words, int bits, uint16_t states[kExl3TileElems]) {
  uint32_t u[8 * kExl3MaxBits + 1];
  stream_words(words, bits, u);
  const int nw = 8 * bits;
  u[nw] = u[0];  // never read for valid positions; keeps the 64-bit window in bounds
  const uint32_t mask = (1u << bits) - 1u;
  // Tail-biting: the state before position 0 is the stream's last 16 bits,
  // which are the low half of the last word (the stream length 256*K is a
  // multiple of 32).
  uint32_t state = u[nw - 1] & 0xFFFFu;
  for (int p = 0; p < kExl3TileElems; ++p) {
    const int pos = p * bits, w = pos >> 5, off = pos & 31;
    // Bits [pos, pos+K) never cross more than one word boundary (off + K <= 39).
    const uint64_t window = static_cast<uint64_t>(u[w]) << 32 | u[w + 1];
    const uint32_t fresh = static_cast<uint32_t>(window >> (64 - off - bits)) & mask;
    state = ((state << bits) | fresh) & 0xFFFFu;
    states[p] = static_cast<uint16_t>(state);
  }
}

void exl3_decode_tile(const int16_t* words, int bits, Exl3Codebook cb, uint16_t out[kExl3TileElems]) {
  uint16_t states[kExl3TileElems];
  exl3_tile_states(words, bits, states);
  const uint16_t* table = exl3_codebook_table(cb);
  for (int p = 0; p < kExl3TileElems; ++p) {
    const Exl3TilePos at = exl3_tile_position(p);
    out[at.row * 16 + at.col] = table[states[p]];
  }
}

void exl3_decode_tile_f32(const int16_t* words, int bits, const float* table, float* out, int64_t ld) {
  // Stream position p = 8 * lane + j: row 2 * (lane % 4) + (j & 1) + 8 * ((j >> 1) & 1),
  // col lane / 4 + 8 * (j >> 2) (exl3_tile_position, unrolled over the lane's eight).
  uint16_t states[kExl3TileElems];
  exl3_tile_states(words, bits, states);
  for (int lane = 0; lane < 32; ++lane) {
    const uint16_t* st = states + 8 * lane;
    float* o = out + (2 * (lane % 4)) * ld + lane / 4;
    o[0] = table[st[0]];
    o[ld] = table[st[1]];
    o[8 * ld] = table[st[2]];
    o[9 * ld] = table[st[3]];
    o[8] = table[st[4]];
    o[ld + 8] = table[st[5]];
    o[8 * ld + 8] = table[st[6]];
    o[9 * ld + 8] = table[st[7]];
  }
}

Tensor exl3_unpack_states(const Exl3Weight& w, const std::string& name) {
  require_host_exl3(w, name);
  const int64_t tk = w.trellis.size(0), tn = w.trellis.size(1), words = w.trellis.size(2);
  Tensor out = Tensor::empty({tk, tn, kExl3TileElems}, DType::kI16);
  const int16_t* src = w.trellis.data<int16_t>();
  uint16_t* dst = out.data<uint16_t>();
  parallel_rows(tk * tn, 256 * w.bits, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) exl3_tile_states(src + t * words, w.bits, dst + t * kExl3TileElems);
  });
  return out;
}

Tensor exl3_decode_w_hat(const Exl3Weight& w, const std::string& name) {
  require_host_exl3(w, name);
  const int64_t tk = w.trellis.size(0), tn = w.trellis.size(1), words = w.trellis.size(2);
  const int64_t n = tn * kExl3Tile;
  Tensor out = Tensor::empty({tk * kExl3Tile, n}, DType::kF16);
  const int16_t* src = w.trellis.data<int16_t>();
  uint16_t* dst = out.data<uint16_t>();
  parallel_rows(tk * tn, 256 * w.bits, [&](int64_t b, int64_t e) {
    uint16_t tile[kExl3TileElems];
    for (int64_t t = b; t < e; ++t) {
      exl3_decode_tile(src + t * words, w.bits, w.codebook, tile);
      const int64_t i = t / tn, j = t % tn;
      for (int r = 0; r < 16; ++r) {
        std::memcpy(dst + (i * kExl3Tile + r) * n + j * kExl3Tile, tile + r * 16, 16 * sizeof(uint16_t));
      }
    }
  });
  return out;
}

std::vector<float> exl3_f16_vector(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  convert_to_f32(t.raw(), DType::kF16, v.data(), v.size());
  return v;
}

void fwht128(float* x, int64_t n, int64_t stride) { fwht128_rows(x, n, 1, stride); }

Tensor exl3_dequantize(const Exl3Weight& w, const std::string& name) {
  require_host_exl3(w, name);
  const int64_t k = w.in_features(), n = w.out_features();
  const int64_t words = w.trellis.size(2), tiles_n = w.trellis.size(1);
  const int16_t* trellis = w.trellis.data<int16_t>();
  const float* table = exl3_codebook_table_f32(w.codebook);
  Tensor out = Tensor::empty({k, n}, DType::kF32);
  float* m = out.data<float>();
  // One 128-row band at a time: decode, Hadamard down the columns, then along each row, then scale.
  const std::vector<float> suh = exl3_f16_vector(w.suh), svh = exl3_f16_vector(w.svh);
  parallel_rows(k / kBlock, kBlock * n * 16, [&](int64_t b, int64_t e) {
    for (int64_t band = b; band < e; ++band) {
      float* rows = m + band * kBlock * n;
      for (int64_t i = 0; i < kBlock / kExl3Tile; ++i) {
        const int64_t ti = band * (kBlock / kExl3Tile) + i;
        for (int64_t j = 0; j < tiles_n; ++j) {
          exl3_decode_tile_f32(trellis + (ti * tiles_n + j) * words, w.bits, table,
                               rows + i * kExl3Tile * n + j * kExl3Tile, n);
        }
      }
      fwht128_rows(rows, kBlock, n, n);
      for (int64_t r = 0; r < kBlock; ++r) {
        float* row = rows + r * n;
        fwht128(row, n);
        const float s = suh[band * kBlock + r];
        for (int64_t c = 0; c < n; ++c) row[c] = row[c] * s * svh[c];
      }
    }
  });
  return out;
}

Tensor exl3_dequantize_linear(const Exl3Weight& w, int64_t in_features, int64_t out_features,
                              const std::string& name) {
  if (in_features < 1 || out_features < 1 || in_features > w.in_features() || out_features > w.out_features())
    throw StatusError(invalid_argument(name + ": " + std::to_string(in_features) + " -> " +
                                       std::to_string(out_features) + " does not fit the EXL3 weight's " +
                                       std::to_string(w.in_features()) + " x " + std::to_string(w.out_features())));
  const Tensor full = exl3_dequantize(w, name);  // [k_pad, n_pad], input-major
  Tensor t = Tensor::empty({out_features, in_features}, DType::kF32);
  const float* src = full.data<float>();
  float* dst = t.data<float>();
  const int64_t n_pad = full.size(1);
  constexpr int64_t kB = 64;  // transposed in blocks: both sides stay in cache
  for (int64_t i0 = 0; i0 < in_features; i0 += kB)
    for (int64_t o0 = 0; o0 < out_features; o0 += kB)
      for (int64_t i = i0; i < std::min(in_features, i0 + kB); ++i)
        for (int64_t o = o0; o < std::min(out_features, o0 + kB); ++o)
          dst[o * in_features + i] = src[i * n_pad + o];
  return t;
}

}  // namespace tf
