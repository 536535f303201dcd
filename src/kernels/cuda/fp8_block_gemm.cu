// FP8 block-scaled GEMM on mma.sync e4m3 tensor cores (see fp8_block_gemm.h).
//
// Block tile 128 (M) x 128 (N), K step 128 bytes = one scale block. 8 warps as 2 x 4,
// each 64 x 32 outputs = 4 m16 x 4 n8 mma tiles. Per K step a warp runs 4 k32 steps
// into `part` (f32, zeroed per step), then folds part * sx[row] * sw into `acc`: the
// tensor cores never see a scale, and their reduced-precision accumulation (Hopper
// keeps ~2^-14 of the running sum inside one mma chain) only spans 128 products.
//
// Shared memory: per stage an A tile (128 rows of x, 128 bytes) and a B tile (128 rows
// of W), 16 B chunk c of row r stored at chunk c ^ (r & 7), so the 8 row addresses of
// an ldmatrix phase (same logical chunk, 8 rows) hit 8 distinct 16 B bank groups.
// ldmatrix .b16 on 8-bit data hands lane l the 4 bytes (l % 4) of row l / 4 of each
// 8 x 16 B matrix, which is exactly the m16n8k32 A (row-major) / B (column-major =
// W's rows) fragment layout.
#include <cuda_fp8.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/fp8_block_gemm.h"

namespace tf::cuda {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 128;
constexpr int kStages = 4;    // the wgmma kernel's ring, and the mma.sync kernel's where 4 fit
constexpr int kMinStages = 2;
constexpr int kThreads = 256;
constexpr int kTileBytes = kBM * kBK;                  // A and B tiles are both 128 x 128 bytes
constexpr int kStageBytes = 2 * kTileBytes + kBM * 4;  // A, B, the 128 rows' activation scales
// The mma.sync kernel's shared memory: ~130 KiB at 4 stages; a GPU with less per block
// (sm_120 / sm_121: 99 KiB) runs the same kernel with 3 stages (same sums: the ring's
// depth changes only when a tile is loaded).
constexpr int mma_smem_bytes(int stages) { return stages * kStageBytes; }
constexpr int kGroupM = 8;  // M tiles walked together so co-resident blocks share W tiles in L2
static_assert(kBM == kBN && kBK == 128, "one weight scale per block and K step");

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a (16 x 32, row) * b (32 x 8, col), e4m3 in, f32 accumulate.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of 16 B chunk `chunk` of row `row` in a swizzled 128 x 128 B tile.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kBK + ((chunk ^ (row & 7)) << 4));
}

// Rows [row0, row0 + 128) x bytes [kbyte0, kbyte0 + 128) of a [rows, ld] byte matrix
// into a swizzled tile; rows >= `rows` and bytes >= k16 as zeros. 1024 chunks, 4 a thread.
__device__ __forceinline__ void load_tile(uint32_t tile, const uint8_t* __restrict__ g, int64_t ld,
                                          int64_t rows, int64_t row0, int64_t kbyte0, int64_t k16) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
    const int r = idx >> 3, c = idx & 7;
    const int64_t gr = row0 + r, gk = kbyte0 + c * 16;
    const bool ok = gr < rows && gk < k16;
    cp_async_16(tile + swz(r, c), ok ? g + gr * ld + gk : g, ok);
  }
}

// One pipeline stage: K step kt of the A (x) and B (W) tiles and sx[m0 .. m0+127, kt].
__device__ __forceinline__ void load_stage(uint32_t st, const Fp8BlockGemmArgs& a, int64_t m0, int64_t n0,
                                           int kt, int kt_count, int64_t k16) {
  load_tile(st, a.xq, a.ldx, a.m, m0, int64_t(kt) * kBK, k16);
  load_tile(st + kTileBytes, a.wq, a.ldw, a.n, n0, int64_t(kt) * kBK, k16);
  if (threadIdx.x < kBM) {
    const int64_t row = m0 + threadIdx.x;
    const bool ok = row < a.m;
    cp_async_4(st + 2 * kTileBytes + threadIdx.x * 4, ok ? a.sx + row * kt_count + kt : a.sx, ok);
  }
}

template <int Stages>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_block_gemm_kernel(Fp8BlockGemmArgs a, int tiles_m, int tiles_n, bool vec_out) {
  extern __shared__ __align__(128) uint8_t smem[];
  // Grouped raster: consecutive blocks walk kGroupM M tiles, then the next N tile.
  const int pid = static_cast<int>(blockIdx.x);
  const int per_group = kGroupM * tiles_n;
  const int first_m = (pid / per_group) * kGroupM;
  const int group_m = min(tiles_m - first_m, kGroupM);
  const int tm = first_m + (pid % per_group) % group_m;
  const int tn = (pid % per_group) / group_m;

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t(tm) * kBM, n0 = int64_t(tn) * kBN;
  const int64_t k16 = (a.k + 15) / 16 * 16;
  const int kt_count = static_cast<int>((a.k + kBK - 1) / kBK);
  const uint32_t base = smem_addr(smem);

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

#pragma unroll
  for (int s = 0; s < Stages - 1; ++s) {
    if (s < kt_count) load_stage(base + s * kStageBytes, a, m0, n0, s, kt_count, k16);
    cp_async_commit();
  }

  const float* sw_row = a.sw + int64_t(tn) * kt_count;

  for (int kt = 0; kt < kt_count; ++kt) {
    cp_async_wait<Stages - 2>();
    __syncthreads();  // stage kt landed for all threads; stage kt-1 is free for reuse
    {
      const int nk = kt + Stages - 1;
      if (nk < kt_count) load_stage(base + (nk % Stages) * kStageBytes, a, m0, n0, nk, kt_count, k16);
      cp_async_commit();
    }
    const float swv = __ldg(sw_row + kt);  // issued before the MMAs so its latency hides

    float part[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) part[i][j][c] = 0.0f;

    const uint32_t sa = base + (kt % Stages) * kStageBytes, sb = sa + kTileBytes;
#pragma unroll
    for (int ks = 0; ks < kBK / 32; ++ks) {
      uint32_t bf[4][2];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int row = wn * 32 + jj * 16 + (lane & 7) + (lane >> 4) * 8;
        uint32_t r[4];
        ldmatrix_x4(r, sb + swz(row, ks * 2 + ((lane >> 3) & 1)));
        bf[2 * jj][0] = r[0];
        bf[2 * jj][1] = r[1];
        bf[2 * jj + 1][0] = r[2];
        bf[2 * jj + 1][1] = r[3];
      }
      // One A fragment at a time keeps the register count under 255 (no spills).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = wm * 64 + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        uint32_t af[4];
        ldmatrix_x4(af, sa + swz(row, ks * 2 + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_e4m3(part[i][j], af, bf[j][0], bf[j][1]);
      }
    }
    // This thread's rows: wm*64 + i*16 + g (+ 8); their scales sit in the stage.
    const float* sxs = reinterpret_cast<const float*>(smem + (kt % Stages) * kStageBytes + 2 * kTileBytes);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float s0 = sxs[wm * 64 + i * 16 + g] * swv, s1 = sxs[wm * 64 + i * 16 + g + 8] * swv;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[i][j][0] = fmaf(part[i][j][0], s0, acc[i][j][0]);
        acc[i][j][1] = fmaf(part[i][j][1], s0, acc[i][j][1]);
        acc[i][j][2] = fmaf(part[i][j][2], s1, acc[i][j][2]);
        acc[i][j][3] = fmaf(part[i][j][3], s1, acc[i][j][3]);
      }
    }
  }
  cp_async_wait<0>();

  // Fragment c0, c1: row g, columns 2t, 2t+1; c2, c3: row g + 8.
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = m0 + wm * 64 + i * 16 + g + 8 * h;
      if (row >= a.m) continue;
      float* orow = a.out + row * a.ldo;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n0 + wn * 32 + j * 8 + 2 * t;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (vec_out && col + 1 < a.n) {
          float2* p = reinterpret_cast<float2*>(orow + col);
          if (a.accumulate) {
            const float2 o = *p;
            v0 += o.x;
            v1 += o.y;
          }
          *p = make_float2(v0, v1);
        } else {
          if (col < a.n) orow[col] = a.accumulate ? orow[col] + v0 : v0;
          if (col + 1 < a.n) orow[col + 1] = a.accumulate ? orow[col + 1] + v1 : v1;
        }
      }
    }
}

// ---- wgmma path (native FP8 on sm_90a) ----------------------------------------------
// Same tiles, same cp.async stages and the same swizzle, which is exactly wgmma's 128-byte
// swizzle of a K-major operand (16 B chunk c of row r at c ^ (r % 8) within 1024-byte
// atoms of 8 rows), so the tiles are read through shared-memory descriptors: warpgroup
// wg (of 2) runs m64n128k32 on rows 64 wg .. 64 wg + 63 of A against all 128 rows of B,
// four k32 steps per K step into `part`, then folds part * sx * sw into `acc` as above.
// Layout: [A stages][B stages][sx stages], A/B tiles 1024-aligned.
constexpr int kWgSmemBytes = kStages * 2 * kTileBytes + kStages * kBM * 4 + 1024;

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 B apart.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr) {
  uint64_t d = (addr & 0x3FFFF) >> 4;
  d |= uint64_t{1} << 16;          // leading byte offset (unused for swizzled K-major)
  d |= uint64_t{1024 >> 4} << 32;  // stride byte offset: next 8 rows
  d |= uint64_t{1} << 62;          // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Keeps the compiler from touching the accumulators across the asynchronous MMA.
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// d (64 x 128 f32 fragment) = (accumulate ? d : 0) + A (64 x 32) * B (128 x 32)^T, e4m3.
__device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
}

__global__ void __launch_bounds__(kThreads, 1)
    fp8_block_gemm_wgmma_kernel(Fp8BlockGemmArgs a, int tiles_m, int tiles_n, bool vec_out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma exists on sm_90a only
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const int pid = static_cast<int>(blockIdx.x);
  const int per_group = kGroupM * tiles_n;
  const int first_m = (pid / per_group) * kGroupM;
  const int group_m = min(tiles_m - first_m, kGroupM);
  const int tm = first_m + (pid % per_group) % group_m;
  const int tn = (pid % per_group) / group_m;

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t(tm) * kBM, n0 = int64_t(tn) * kBN;
  const int64_t k16 = (a.k + 15) / 16 * 16;
  const int kt_count = static_cast<int>((a.k + kBK - 1) / kBK);
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t a_base = base, b_base = base + kStages * kTileBytes,
                 s_base = base + 2 * kStages * kTileBytes;
  const uint8_t* sx_smem = smem_raw + (s_base - raw);

  auto load = [&](int stage, int kt) {
    load_tile(a_base + stage * kTileBytes, a.xq, a.ldx, a.m, m0, int64_t(kt) * kBK, k16);
    load_tile(b_base + stage * kTileBytes, a.wq, a.ldw, a.n, n0, int64_t(kt) * kBK, k16);
    if (tid < kBM) {
      const int64_t row = m0 + tid;
      const bool ok = row < a.m;
      cp_async_4(s_base + stage * kBM * 4 + tid * 4, ok ? a.sx + row * kt_count + kt : a.sx, ok);
    }
  };

  float acc[64], part[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = part[i] = 0.0f;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kt_count) load(s, s);
    cp_async_commit();
  }
  const float* sw_row = a.sw + int64_t(tn) * kt_count;
  const int r0 = wg * 64 + warp * 16 + g;  // this thread's rows in the tile: r0, r0 + 8

  for (int kt = 0; kt < kt_count; ++kt) {
    cp_async_wait<kStages - 2>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
    __syncthreads();
    {
      const int nk = kt + kStages - 1;
      if (nk < kt_count) load(nk % kStages, nk);
      cp_async_commit();
    }
    const float swv = __ldg(sw_row + kt);
    const int st = kt % kStages;
    const uint64_t da = wgmma_desc(a_base + st * kTileBytes + wg * 64 * kBK);
    const uint64_t db = wgmma_desc(b_base + st * kTileBytes);
#pragma unroll
    for (int i = 0; i < 64; ++i) reg_fence(part[i]);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBK / 32; ++ks) wgmma_m64n128k32(part, da + 2 * ks, db + 2 * ks, ks > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait0();
#pragma unroll
    for (int i = 0; i < 64; ++i) reg_fence(part[i]);
    const float* sxs = reinterpret_cast<const float*>(sx_smem + st * kBM * 4);
    const float s0 = sxs[r0] * swv, s1 = sxs[r0 + 8] * swv;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      acc[4 * j + 0] = fmaf(part[4 * j + 0], s0, acc[4 * j + 0]);
      acc[4 * j + 1] = fmaf(part[4 * j + 1], s0, acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(part[4 * j + 2], s1, acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(part[4 * j + 3], s1, acc[4 * j + 3]);
    }
  }
  cp_async_wait<0>();

  // Fragment: d[4j + c] = row r0 + 8 (c >= 2), column 8 j + 2 t + (c & 1).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = m0 + r0 + 8 * h;
    if (row >= a.m) continue;
    float* orow = a.out + row * a.ldo;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int64_t col = n0 + 8 * j + 2 * t;
      float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (vec_out && col + 1 < a.n) {
        float2* p = reinterpret_cast<float2*>(orow + col);
        if (a.accumulate) {
          const float2 o = *p;
          v0 += o.x;
          v1 += o.y;
        }
        *p = make_float2(v0, v1);
      } else {
        if (col < a.n) orow[col] = a.accumulate ? orow[col] + v0 : v0;
        if (col + 1 < a.n) orow[col + 1] = a.accumulate ? orow[col + 1] + v1 : v1;
      }
    }
  }
#else
  __trap();  // never launched: the launcher picks mma.sync where wgmma is missing
#endif
}

// x [m, k] (row stride ldx) -> codes [m, ldq] (zeros past k) and scales [m, kb]. One
// warp per (row, 128 block), 4 values a lane, written as one 32-bit word.
__global__ void quantize_activations_kernel(uint8_t* __restrict__ q, int64_t ldq, float* __restrict__ scales,
                                            const float* __restrict__ x, int64_t ldx, int64_t m, int64_t k) {
  const int64_t kb = (k + kBK - 1) / kBK;
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (warp >= m * kb) return;
  const int64_t r = warp / kb, b = warp % kb;
  const int64_t c0 = b * kBK + lane * 4;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = c0 + i < k ? x[r * ldx + c0 + i] : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_reduce(amax, MaxOp());
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // x / s, not x * (1 / s): the CPU-side reference quantizes the same way.
    const uint32_t code = __nv_cvt_float_to_fp8(v[i] / s, __NV_SATFINITE, __NV_E4M3);
    word |= code << (8 * i);
  }
  if (c0 < ldq) *reinterpret_cast<uint32_t*>(q + r * ldq + c0) = word;  // ldq % 16 == 0: all 4 bytes inside
  if (lane == 0) scales[r * kb + b] = s;
}

// codes [n, k] -> dst [n, ld] with zeros in [k, ld).
__global__ void pad_codes_kernel(uint8_t* __restrict__ dst, int64_t ld, const uint8_t* __restrict__ src,
                                 int64_t n, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * ld;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / ld, c = i % ld;
    dst[i] = c < k ? src[r * k + c] : uint8_t{0};
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

std::atomic<int64_t> g_mma_calls{0};

}  // namespace

void fp8_block_gemm_launch(cudaStream_t stream, const Fp8BlockGemmArgs& a) {
  const int64_t k16 = (a.k + 15) / 16 * 16;
  auto bad = [](const std::string& why) {
    throw StatusError(invalid_argument("fp8_block_gemm_launch: " + why));
  };
  if (a.m < 0 || a.n < 0 || a.k < 0) bad("negative size");
  if (a.m == 0 || a.n == 0) return;
  if (a.k == 0) bad("k is 0");
  if (a.ldx < k16 || a.ldx % 16 != 0 || a.ldw < k16 || a.ldw % 16 != 0)
    bad("code rows must be 16-byte multiples covering k (ldx " + std::to_string(a.ldx) + ", ldw " +
        std::to_string(a.ldw) + ", k " + std::to_string(a.k) + ")");
  if (!aligned16(a.xq) || !aligned16(a.wq)) bad("code pointers must be 16-byte aligned");
  if (a.ldo < a.n) bad("ldo < n");
  const int64_t tiles_m = (a.m + kBM - 1) / kBM, tiles_n = (a.n + kBN - 1) / kBN;
  if (tiles_m * tiles_n > INT32_MAX || tiles_n * kGroupM > INT32_MAX) bad("too many tiles");
  const bool vec_out = (reinterpret_cast<uintptr_t>(a.out) & 7) == 0 && a.ldo % 2 == 0;
  // wgmma only where the device and this build have it; mma.sync with as many ring
  // stages as the device's shared memory holds otherwise.
  const bool wg = a.kernel == Fp8GemmKernel::kWgmma && device_limits().wgmma && smem_fits(kWgSmemBytes);
  int stages = kStages;
  while (!wg && stages > kMinStages && !smem_fits(mma_smem_bytes(stages))) --stages;
  const unsigned blocks = static_cast<unsigned>(tiles_m * tiles_n);
  auto launch = [&](auto kernel, int smem, const char* what) {
    if (const Status s = set_dynamic_smem(kernel, smem, what); !s.is_ok()) throw StatusError(s);
    kernel<<<blocks, kThreads, smem, stream>>>(a, static_cast<int>(tiles_m), static_cast<int>(tiles_n), vec_out);
  };
  if (wg)
    launch(fp8_block_gemm_wgmma_kernel, kWgSmemBytes, "fp8_block_gemm (wgmma)");
  else if (stages == 4)
    launch(fp8_block_gemm_kernel<4>, mma_smem_bytes(4), "fp8_block_gemm (mma.sync)");
  else if (stages == 3)
    launch(fp8_block_gemm_kernel<3>, mma_smem_bytes(3), "fp8_block_gemm (mma.sync)");
  else
    launch(fp8_block_gemm_kernel<2>, mma_smem_bytes(2), "fp8_block_gemm (mma.sync)");
  check_launch(wg ? "fp8_block_gemm (wgmma)" : "fp8_block_gemm (mma.sync)");
}

void fp8_quantize_activations(cudaStream_t stream, uint8_t* xq, int64_t ldq, float* sx, const float* x,
                              int64_t ldx_f32, int64_t m, int64_t k) {
  if (ldq % 16 != 0 || ldq < k || !aligned16(xq))
    throw StatusError(invalid_argument("fp8_quantize_activations: ldq " + std::to_string(ldq) +
                                       " must be a 16-multiple >= k " + std::to_string(k) +
                                       ", codes 16-aligned"));
  const int64_t warps = m * ((k + kBK - 1) / kBK);
  if (warps == 0) return;
  quantize_activations_kernel<<<grid_1d(warps * 32), 256, 0, stream>>>(xq, ldq, sx, x, ldx_f32, m, k);
  check_launch("fp8_quantize_activations");
}

void fp8_block_gemm_mma(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w, bool accumulate) {
  if (w.format() != MatrixFormat::kFp8Block)
    throw StatusError(invalid_argument("fp8_block_gemm_mma: " + w.describe() + " is not fp8 block-scaled"));
  const int64_t n = w.size(0), k = w.size(1);
  if (k == 0 || x.numel() % k != 0)
    throw StatusError(
        invalid_argument("fp8_block_gemm_mma: x " + x.describe() + " does not match " + w.describe()));
  const int64_t m = x.numel() / k;
  if (m == 0 || n == 0) return;
  const int64_t ldq = fp8_activation_stride(k), kb = (k + kBK - 1) / kBK;
  Tensor xq = ctx.scratch(m * ldq);
  Tensor sx = ctx.scratch(m * kb * 4);
  fp8_quantize_activations(ctx.stream, xq.data<uint8_t>(), ldq, sx.data<float>(), x.data<float>(), k, m, k);
  Fp8BlockGemmArgs a;
  a.wq = w.codes().data<uint8_t>();
  a.ldw = k;
  Tensor wpad;
  if (k % 16 != 0 || !aligned16(a.wq)) {  // rows not 16-byte multiples: a padded copy
    wpad = ctx.scratch(n * ldq);
    pad_codes_kernel<<<grid_1d(n * ldq), 256, 0, ctx.stream>>>(wpad.data<uint8_t>(), ldq, a.wq, n, k);
    check_launch("fp8_block_gemm_mma: pad codes");
    a.wq = wpad.data<uint8_t>();
    a.ldw = ldq;
  }
  a.out = out.data<float>();
  a.ldo = n;
  a.xq = xq.data<uint8_t>();
  a.ldx = ldq;
  a.sx = sx.data<float>();
  a.sw = w.scales().data<float>();
  a.m = m;
  a.n = n;
  a.k = k;
  a.accumulate = accumulate;
  a.kernel = default_fp8_gemm_kernel();
  fp8_block_gemm_launch(ctx.stream, a);
  g_mma_calls.fetch_add(1);
}

Fp8GemmKernel default_fp8_gemm_kernel() {
  const char* v = std::getenv("TF_FP8_KERNEL");
  const bool mma_sync = (v != nullptr && std::string(v) == "mmasync") || !device_limits().wgmma;
  return mma_sync ? Fp8GemmKernel::kMmaSync : Fp8GemmKernel::kWgmma;
}

int64_t fp8_block_gemm_mma_count() { return g_mma_calls.load(); }

Fp8PrefillPath fp8_prefill_path() {
  // The default stays dequantize + cuBLAS until the MMA kernel has passed its GPU test.
  const char* v = std::getenv("TF_FP8_PREFILL");
  if (v == nullptr) return Fp8PrefillPath::kDequant;
  const std::string s(v);
  if (s == "mma") return Fp8PrefillPath::kMma;
  if (s == "lt") return Fp8PrefillPath::kLt;
  return Fp8PrefillPath::kDequant;
}

}  // namespace tf::cuda
