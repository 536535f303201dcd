// The K = 4 mcg EXL3 decode rate on its own (issue #8, session 32), against the HBM rate the GEMV
// target asks for, and whether a shared-memory table of the codebook lifts it. The decode loop is
// issue-bound on the integer ALU (bench/RESULTS.md sessions 10-13); a 65,536-entry fp16 table of
// w_hat (128 KB of shared memory) turns a weight's hash, mask/xor and halves-add into one 2-byte
// load, but 32 random lookups per warp instruction meet bank conflicts.
// This kernel decodes tiles held in shared memory (no HBM traffic, like exl3_cuda_bench's
// decode-only mode) and multiplies them with mma.m16n8k16 as the flat MoE loop does, taking NL of a
// lane's 4 value pairs per tile from the table and the rest by arithmetic, and prints tiles per
// second per variant and the weight bandwidth that rate would decode (x 128 bytes per tile) beside
// the HBM bandwidth of tf::cuda::probe_device (the roofline probe of `tensorfold bench --probe`).
// It also checks that both ways give the same A fragments bit for bit (exit 1 if not). H200 (session
// 32): 14.1 G tiles/s by arithmetic at 32 warps per SM (1.81 TB/s of weights, 42% of HBM), every
// table mix slower (all pairs from the table: 8.2 G tiles/s).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cuda/device_probe.h"
#include "kernels/cuda/exl3_decode.cuh"

namespace {

using namespace tf::cuda::exl3;
using tf::cuda::mma_f16_16816;

constexpr int kTiles = 64;                     // tiles per block in shared memory (8 KB at K = 4)
constexpr int kTableBytes = 65536 * 2;         // fp16 w_hat of every state
constexpr int kSmem = kTableBytes + kTiles * 32 * 4;

__device__ __forceinline__ uint32_t lut(const uint16_t* tbl, uint32_t s) { return tbl[s]; }

// The lane's A fragment of tile t: pairs q < NL from the table, the others by arithmetic.
template <int NL>
__device__ __forceinline__ void fragment(const uint16_t* tbl, const uint32_t* t, int lane, uint32_t (&a)[4]) {
  const uint32_t p = t[(lane + 31) & 31], o = t[lane];
  if constexpr (NL == 0) {
    uint32_t x[8];
    lane_hashes_k4<kCbMcg>(p, o, x);
    a[0] = pair_values<kCbMcg>(x[0], x[1]);
    a[1] = pair_values<kCbMcg>(x[4], x[5]);
    a[2] = pair_values<kCbMcg>(x[2], x[3]);
    a[3] = pair_values<kCbMcg>(x[6], x[7]);
  } else {
    uint32_t st[8];
    lane_states_k4(p, o, st);
    constexpr int first[4] = {0, 4, 2, 6};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = first[q];
      if (q < NL) a[q] = __byte_perm(lut(tbl, st[j]), lut(tbl, st[j + 1]), 0x5410);
      else a[q] = decode_pair<kCbMcg>(st[j], st[j + 1]);
    }
  }
}

template <int NL>
__global__ void __launch_bounds__(1024, 1) probe_kernel(const uint32_t* __restrict__ words, int iters, float* out,
                                                         uint32_t* frags) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto* tbl = reinterpret_cast<uint16_t*>(smem);
  auto* tiles = reinterpret_cast<uint32_t*>(smem + kTableBytes);
  for (int s = threadIdx.x; s < 65536; s += blockDim.x) {
    const uint32_t v = decode_pair<kCbMcg>(static_cast<uint32_t>(s), static_cast<uint32_t>(s));
    tbl[s] = static_cast<uint16_t>(v & 0xFFFFu);
  }
  for (int i = threadIdx.x; i < kTiles * 32; i += blockDim.x) tiles[i] = words[blockIdx.x * kTiles * 32 + i];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[4] = {0, 0, 0, 0};
  const uint32_t xb0 = 0x3C003C00u ^ (lane << 3), xb1 = 0x3C003C00u ^ (lane << 5);
  if (frags && blockIdx.x == 0) {  // the fragments of every tile, for the bit check
    for (int t = warp; t < kTiles; t += blockDim.x / 32) {
      uint32_t a[4];
      fragment<NL>(tbl, tiles + t * 32, lane, a);
      for (int q = 0; q < 4; ++q) frags[(t * 32 + lane) * 4 + q] = a[q];
    }
  }
  int t = warp;
  for (int i = 0; i < iters; ++i) {
    uint32_t a[4];
    fragment<NL>(tbl, tiles + t * 32, lane, a);
    mma_f16_16816(acc, a, xb0, xb1);
    mma_f16_16816(acc, a, xb1, xb0);
    t = (t + 1) & (kTiles - 1);
  }
  out[(blockIdx.x * blockDim.x + threadIdx.x)] = acc[0] + acc[1] + acc[2] + acc[3];
}

template <int NL>
double run(int blocks, int threads, int iters, const uint32_t* words, float* out, uint32_t* frags,
           std::vector<uint32_t>& got) {
  cudaFuncSetAttribute(probe_kernel<NL>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  probe_kernel<NL><<<blocks, threads, kSmem>>>(words, iters, out, frags);  // warm-up + fragments
  cudaMemcpy(got.data(), frags, got.size() * 4, cudaMemcpyDeviceToHost);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  probe_kernel<NL><<<blocks, threads, kSmem>>>(words, iters, out, nullptr);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  if (cudaGetLastError() != cudaSuccess) return -1;
  return static_cast<double>(blocks) * (threads / 32) * iters / (ms * 1e-3);  // tiles per second
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int iters = 20000;
  std::vector<uint32_t> host(static_cast<size_t>(sms) * kTiles * 32);
  uint32_t r = 12345;
  for (auto& w : host) w = (r = r * 1664525u + 1013904223u);
  uint32_t *words, *frags;
  float* out;
  cudaMalloc(&words, host.size() * 4);
  cudaMalloc(&out, static_cast<size_t>(sms) * 1024 * 4);
  cudaMalloc(&frags, kTiles * 32 * 4 * 4);
  cudaMemcpy(words, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  std::vector<uint32_t> ref(kTiles * 32 * 4), got(kTiles * 32 * 4);
  const auto probe = tf::cuda::probe_device(0);
  const double hbm = probe ? probe->hbm_gbps * 1e9 : 0.0;  // bytes per second, read + write
  std::printf("HBM (device copy): %.2f TB/s; the GEMV target, 70%% of it, needs %.1f G tiles/s of K=4 decode\n",
              hbm * 1e-12, 0.7 * hbm / 128e9);
  std::printf("exl3 K=4 mcg decode from shared memory + 2 MMAs per tile, %d SMs, one block per SM\n", sms);
  std::printf("warps/SM  table pairs/4  G tiles/s   TB/s of K=4 weights  %% of HBM  fragments == arithmetic\n");
  bool all_same = true;
  for (int threads : {256, 512, 1024}) {
    auto line = [&](int nl, double tps) {
      bool same = tps > 0;
      if (nl == 0) ref = got;
      else same = same && got == ref;
      all_same = all_same && same;
      std::printf("%8d  %13d  %9.2f   %19.3f  %8.1f  %s\n", threads / 32, nl, tps * 1e-9, tps * 128e-12,
                  hbm > 0 ? 100.0 * tps * 128 / hbm : 0.0, same ? "yes" : "NO");
    };
    line(0, run<0>(sms, threads, iters, words, out, frags, got));
    line(1, run<1>(sms, threads, iters, words, out, frags, got));
    line(2, run<2>(sms, threads, iters, words, out, frags, got));
    line(3, run<3>(sms, threads, iters, words, out, frags, got));
    line(4, run<4>(sms, threads, iters, words, out, frags, got));
  }
  return all_same ? 0 : 1;
}
