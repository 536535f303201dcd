// Warp-level TF32 tensor-core helpers (sm_80+ mma.sync m16n8k8) with the 3xTF32 split
// that keeps f32 accuracy: v = hi + lo with hi = tf32(v), lo = tf32(v - hi), and a product
// sums a_hi b_lo + a_lo b_hi + a_hi b_hi (the lo*lo term is below f32 rounding).
//
// Fragment layouts of mma.m16n8k8.tf32 (g = lane / 4, t = lane % 4):
//   A (16x8, row major): a[0] = (g, t), a[1] = (g+8, t), a[2] = (g, t+4), a[3] = (g+8, t+4)
//   B (8x8, "col"):      b[0] = (k t, n g), b[1] = (k t+4, n g)
//   C (16x8, f32):       c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
#pragma once

#include <cstdint>

namespace tf::cuda {

__device__ __forceinline__ uint32_t to_tf32_bits(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
}

// hi and lo TF32 parts of n values.
template <int N>
__device__ __forceinline__ void split_tf32x(const float (&v)[N], uint32_t (&hi)[N], uint32_t (&lo)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    hi[i] = to_tf32_bits(v[i]);
    lo[i] = to_tf32_bits(v[i] - __uint_as_float(hi[i]));
  }
}

__device__ __forceinline__ void mma_tf32_1688(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a b at f32 accuracy from split operands (small terms first).
__device__ __forceinline__ void mma_3xtf32(float (&c)[4], const uint32_t (&a_hi)[4],
                                           const uint32_t (&a_lo)[4], const uint32_t (&b_hi)[2],
                                           const uint32_t (&b_lo)[2]) {
  mma_tf32_1688(c, a_lo, b_hi);
  mma_tf32_1688(c, a_hi, b_lo);
  mma_tf32_1688(c, a_hi, b_hi);
}

}  // namespace tf::cuda
