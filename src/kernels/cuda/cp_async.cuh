// 16-byte global -> shared copies that run behind the warp (sm_80+ cp.async, L2 only) and
// their groups: commit closes the copies issued so far into a group, wait<N> returns once
// at most N groups are still in flight (the copies then still need a barrier to be
// visible to other threads).
#pragma once

namespace tf::cuda {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// The same copy to a shared-window address (__cvta_generic_to_shared of the destination, taken
// once by the caller: the conversion costs ~3 instructions per copy where the compiler cannot
// hoist it, e.g. under a per-copy predicate).
__device__ __forceinline__ void cp_async16_shared(unsigned smem_addr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The copies of a kRows x kCols f32 tile (kCols a multiple of 4) from src (row stride
// src_ld floats) to dst (row stride dst_ld), a 16-byte copy per step, the kThreads
// threads of the block in turn (tid = this thread). Commits nothing.
template <int kThreads, int kRows, int kCols>
__device__ __forceinline__ void cp_async_tile(float* dst, int dst_ld, const float* src, int src_ld, int tid) {
  for (int e = tid; e < kRows * (kCols / 4); e += kThreads) {
    const int r = e / (kCols / 4), c = 4 * (e % (kCols / 4));
    cp_async16(dst + r * dst_ld + c, src + r * src_ld + c);
  }
}

}  // namespace tf::cuda
