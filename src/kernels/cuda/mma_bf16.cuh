// Warp-level BF16 (and f16) tensor-core helpers (sm_80+ mma.sync / ldmatrix), shared by the
// prefill kernels (cuda_indexer_prefill.cu, cuda_mla_prefill_mma.cu) and the vision attention (cuda_vision.cu).
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16x16, row major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..),
//                         a[3] = (g+8, 2t+8..)
//   B (16x8, "col"):      b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g)
//   C (16x8, f32):        c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)
//
// Near-f32 products from BF16 tensor cores: a f32 value v is split into hi = bf16(v)
// and lo = bf16(v - hi) (16 significant bits together); a product of two split
// operands keeps hi*hi + hi*lo + lo*hi (three mma), dropping lo*lo (~2^-16 relative),
// and an operand that is exact in bf16 (bf16 or fp8 latents) needs only two.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tf::cuda {

__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same fragments with f16 inputs.
__device__ __forceinline__ void mma_f16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices; lane l gives the address of row (l % 8) of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// The same, each matrix transposed (B fragments from a [k][n] row-major tile).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// A fragment of the 16x16 tile at p (row-major, row stride ld elements).
__device__ __forceinline__ void load_a_frag(uint32_t (&a)[4], const __nv_bfloat16* p, int ld, int lane) {
  ldmatrix_x4(a, p + (lane & 15) * ld + (lane >> 4) * 8);
}

// B fragments of two adjacent n8 tiles from a [n][k] tile at p (n rows, row stride ld):
// b[0], b[1] for n 0..7 and b[2], b[3] for n 8..15, over k 0..15.
__device__ __forceinline__ void load_b_frags_nk(uint32_t (&b)[4], const __nv_bfloat16* p, int ld, int lane) {
  ldmatrix_x4(b, p + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8);
}

// The same two n8 tiles from a [k][n] tile at p (k rows, row stride ld).
__device__ __forceinline__ void load_b_frags_kn(uint32_t (&b)[4], const __nv_bfloat16* p, int ld, int lane) {
  ldmatrix_x4_trans(b, p + ((lane & 7) + (((lane >> 3) & 1) << 3)) * ld + (lane >> 4) * 8);
}

struct Bf16Split {
  __nv_bfloat16 hi, lo;
};
__device__ __forceinline__ Bf16Split split_bf16(float v) {
  const __nv_bfloat16 h = __float2bfloat16_rn(v);
  return {h, __float2bfloat16_rn(v - __bfloat162float(h))};
}

// Two f32 values as a packed bf16 pair (first value in the low half).
__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 a, __nv_bfloat16 b) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(a)) | (static_cast<uint32_t>(__bfloat16_as_ushort(b)) << 16);
}

// Two f32 values rounded to bf16 (nearest even) as a packed pair (first value in the low half).
__device__ __forceinline__ uint32_t round_bf16x2(float a, float b) {
  return pack_bf16(__float2bfloat16_rn(a), __float2bfloat16_rn(b));
}

}  // namespace tf::cuda
