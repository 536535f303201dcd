// Whether an L2 prefetch of a q4 GEMV's weights (the prefetch kernel below), issued on a second
// stream while a stretch of other kernels runs, makes the GEMV that follows faster. Graph-replayed, m = 1,
// the ring kernel (quant_gemv's q4 default). Per shape:
//   cold   the weights rotate over > 400 MB of copies (never in L2 when read),
//   hot    one copy replayed (in L2),
//   pref   cold, prefetched on a forked branch that runs beside `pre` (joined before the GEMV),
//   serial cold, the prefetch launched on the main stream before `pre`,
// where `pre` is a chain of small spin kernels (2 or 8: ~3 / ~12 us, a KDA layer's small kernels) or an
// ALU-bound kernel that also streams 100 MB (the EXL3 routed experts). Times are GPU us per
// iteration minus `pre` alone: what the GEMV adds. Also the prefetch kernel's own (issue) time.
// H200 run2s10: hot is at most 0.5-1.9 us faster than cold (the ring GEMV is not bound by HBM at m = 1)
// and the prefetched GEMV was slower than cold at every shape but the 4.5 MB shared down (lines: -0.6 us),
// so no op prefetches; the bench stays to re-check once the q4 GEMV is bound by HBM.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_graph_timing.h"
#include "kernels/cuda/quant_gemv.h"

namespace {

// ---- the prefetch kernel: up to 8 ranges cut into units (bulk chunks, 128-byte lines or 16-byte
// loads) that the grid's threads take in turn. It only issues the requests: its own time is the
// issue time, the transfers complete after it has exited. Nothing is read into registers that is
// used, nothing is written.
enum class L2PrefetchKind : int {
  kBulk = 0,            // cp.async.bulk.prefetch.L2 of chunk_bytes per instruction (TMA unit)
  kLines = 1,           // prefetch.global.L2 per 128-byte line
  kLinesEvictLast = 2,  // prefetch.global.L2::evict_last per line
  kLoads = 3,           // 16-byte ld.global.nc.L1::no_allocate per thread, results discarded
};

constexpr int kMaxRanges = 8;
constexpr size_t kLineBytes = 128;
constexpr size_t kDefaultChunkBytes = size_t{32} << 10;

struct L2PrefetchRange {
  const void* ptr = nullptr;
  size_t bytes = 0;
};

struct L2PrefetchConfig {
  L2PrefetchKind kind = L2PrefetchKind::kBulk;
  int blocks = 1;
  size_t chunk_bytes = 0;  // kBulk: bytes per instruction (a multiple of 16; 0: 32 KiB)
};

// The ranges as the kernel walks them: range r covers units [first[r], first[r + 1]) starting at begin[r].
struct UnitTable {
  uintptr_t begin[kMaxRanges];
  uintptr_t end[kMaxRanges];
  uint64_t first[kMaxRanges + 1];
  int count;
  uint32_t unit_bytes;
};

template <L2PrefetchKind kKind>
__global__ void l2_prefetch_kernel(const UnitTable t) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  int r = 0;
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < t.first[t.count]; u += stride) {
    while (u >= t.first[r + 1]) ++r;  // units ascend per thread: the range index only moves forward
    const uintptr_t a = t.begin[r] + (u - t.first[r]) * t.unit_bytes;
    if constexpr (kKind == L2PrefetchKind::kBulk) {
      const uint32_t n = static_cast<uint32_t>(min(uint64_t(t.unit_bytes), uint64_t(t.end[r] - a)));
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(n) : "memory");
    } else if constexpr (kKind == L2PrefetchKind::kLines) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    } else if constexpr (kKind == L2PrefetchKind::kLinesEvictLast) {
      asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(a));
    } else {
      uint32_t x0, x1, x2, x3;  // discarded: volatile keeps the load
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                   : "l"(a));
    }
  }
}

void l2_prefetch(cudaStream_t stream, const L2PrefetchRange* ranges, int count, const L2PrefetchConfig& cfg) {
  const size_t chunk = cfg.chunk_bytes ? cfg.chunk_bytes : kDefaultChunkBytes;
  if (count > kMaxRanges || (cfg.kind == L2PrefetchKind::kBulk && chunk % 16)) {
    std::fprintf(stderr, "l2_prefetch: bad arguments\n");
    std::exit(1);
  }
  const size_t unit = cfg.kind == L2PrefetchKind::kBulk    ? chunk
                      : cfg.kind == L2PrefetchKind::kLoads ? 16
                                                           : kLineBytes;
  // Bulk copies need 16-byte aligned bounds: the range shrinks to them; lines and loads start at the
  // aligned address at or below the range.
  UnitTable t{};
  t.unit_bytes = static_cast<uint32_t>(unit);
  for (int i = 0; i < count; ++i) {
    const auto p = reinterpret_cast<uintptr_t>(ranges[i].ptr);
    const bool bulk = cfg.kind == L2PrefetchKind::kBulk;
    const uintptr_t b = bulk ? (p + 15) & ~uintptr_t{15} : p & ~(uintptr_t(unit) - 1);
    uintptr_t e = bulk ? (p + ranges[i].bytes) & ~uintptr_t{15} : p + ranges[i].bytes;
    if (ranges[i].ptr == nullptr || ranges[i].bytes == 0 || e <= b) continue;
    if (cfg.kind == L2PrefetchKind::kLoads) e = (e + 15) & ~uintptr_t{15};  // loads stay 16-byte aligned
    t.begin[t.count] = b;
    t.end[t.count] = e;
    t.first[t.count + 1] = t.first[t.count] + (e - b + unit - 1) / unit;
    ++t.count;
  }
  if (t.count == 0) return;
  for (int i = t.count + 1; i <= kMaxRanges; ++i) t.first[i] = t.first[t.count];
  const int threads = cfg.kind == L2PrefetchKind::kBulk ? 32 : 256;
  const uint64_t need = (t.first[t.count] + threads - 1) / threads;
  const int blocks = static_cast<int>(std::min<uint64_t>(std::max(cfg.blocks, 1), need));
  switch (cfg.kind) {
    case L2PrefetchKind::kBulk:
      l2_prefetch_kernel<L2PrefetchKind::kBulk><<<blocks, threads, 0, stream>>>(t);
      break;
    case L2PrefetchKind::kLines:
      l2_prefetch_kernel<L2PrefetchKind::kLines><<<blocks, threads, 0, stream>>>(t);
      break;
    case L2PrefetchKind::kLinesEvictLast:
      l2_prefetch_kernel<L2PrefetchKind::kLinesEvictLast><<<blocks, threads, 0, stream>>>(t);
      break;
    case L2PrefetchKind::kLoads:
      l2_prefetch_kernel<L2PrefetchKind::kLoads><<<blocks, threads, 0, stream>>>(t);
      break;
  }
  BENCH_CUDA(cudaGetLastError());
}

// ---- the bench

__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    // q4 codes: any byte; f16 scales read from the same pool: keep exponents small and finite (bit 14 off).
    p[i] = h & 0xBFFFBFFFu;
  }
}

// One warp spinning `cycles` clocks: a small latency-bound kernel.
__global__ void spin_kernel(long long cycles, int* sink) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0 && cycles < 0) *sink = 1;
}

// Integer ALU work with a 16-byte load every `alu` steps streaming `bytes` (the EXL3 experts:
// integer-bound, HBM partly used). Every SM gets two blocks.
__global__ void busy_kernel(const uint4* __restrict__ data, size_t n16, int alu, int* sink) {
  uint32_t acc = threadIdx.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16;
       i += size_t(gridDim.x) * blockDim.x) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(data + i));
    uint32_t a = v.x ^ v.y, b = v.z + v.w;
#pragma unroll 4
    for (int j = 0; j < alu; ++j) {
      a = a * 1664525u + b;
      b ^= a >> 7;
    }
    acc += a ^ b;
  }
  if (acc == 0x7fffffffu) *sink = int(acc);
}

struct Mat {
  const uint8_t* codes;
  const uint8_t* scales;
  int64_t n, k;
  size_t code_bytes() const { return size_t(n) * size_t((k + 63) / 64) * 32; }
  size_t scale_bytes() const { return size_t(n) * size_t((k + 63) / 64) * 2; }
};

struct Shape {
  const char* name;
  int64_t n, k;
  int count;  // matrices in one call (quant_gemv_many when > 1)
};

class Pool {
 public:
  explicit Pool(size_t bytes) : size_(bytes) {
    BENCH_CUDA(cudaMalloc(&base_, bytes));
    fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(base_), bytes / 4, 12345u);
    BENCH_CUDA(cudaDeviceSynchronize());
  }
  ~Pool() { cudaFree(base_); }
  void reset() { used_ = 0; }
  const uint8_t* take(size_t bytes) {
    const size_t at = used_;
    used_ = (used_ + bytes + 255) & ~size_t{255};
    if (used_ > size_) {
      std::fprintf(stderr, "pool exhausted\n");
      std::exit(1);
    }
    return static_cast<const uint8_t*>(base_) + at;
  }

 private:
  void* base_ = nullptr;
  size_t size_ = 0, used_ = 0;
};

struct Bench {
  cudaStream_t main = nullptr, side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  int sms = 0;
  float* x = nullptr;
  float* out = nullptr;
  float* ws = nullptr;
  int* sink = nullptr;
  const uint4* busy_data = nullptr;
  size_t busy_n16 = 0;

  void gemv(const std::vector<Mat>& set) {
    tf::cuda::QuantGemvArgs a;
    a.x = x;
    a.ldx = set[0].k;
    a.format = tf::MatrixFormat::kQ4;
    a.m = 1;
    a.k = set[0].k;
    a.sm_count = sms;
    a.workspace = ws;
    a.legacy = true;
    if (set.size() == 1) {
      a.out = out;
      a.ldo = set[0].n;
      a.codes = set[0].codes;
      a.scales = set[0].scales;
      a.n = set[0].n;
      tf::cuda::quant_gemv(main, a);
      return;
    }
    tf::cuda::QuantGemvSegment segs[tf::cuda::kQuantGemvMaxSegments];
    for (size_t i = 0; i < set.size(); ++i)
      segs[i] = {out + i * set[i].n, set[i].n, set[i].codes, set[i].scales, set[i].n};
    tf::cuda::quant_gemv_many(main, a, segs, int(set.size()));
  }
  static std::vector<L2PrefetchRange> ranges(const std::vector<Mat>& set, double fraction) {
    std::vector<L2PrefetchRange> r;
    for (const Mat& m : set) {
      r.push_back({m.codes, size_t(double(m.code_bytes()) * fraction) & ~size_t{127}});
      r.push_back({m.scales, m.scale_bytes()});
    }
    return r;
  }
  void prefetch(cudaStream_t s, const std::vector<Mat>& set, const L2PrefetchConfig& cfg, double fraction) {
    const auto r = ranges(set, fraction);
    l2_prefetch(s, r.data(), int(r.size()), cfg);
  }
};

// A stretch of kernels before the GEMV: `chain` spin kernels of `cycles` each, or the busy kernel (chain <
// 0).
struct Pre {
  std::string name;
  int chain;
  long long cycles;
  int alu;
  void enqueue(Bench& b) const {
    if (chain >= 0) {
      for (int i = 0; i < chain; ++i) spin_kernel<<<1, 32, 0, b.main>>>(cycles, b.sink);
    } else {
      busy_kernel<<<b.sms * 2, 256, 0, b.main>>>(b.busy_data, b.busy_n16, alu, b.sink);
    }
  }
};

// GPU us per iteration of `iterations` enqueues in one graph (node priorities kept, as the model's).
double graph_us(Bench& b, int iterations, const std::function<void(int)>& enqueue) {
  tf::bench::ReplayPlan plan;
  plan.fixed_reps = 10;
  plan.instantiate_flags = cudaGraphInstantiateFlagUseNodePriority;
  return tf::bench::graph_time_per_call(b.main, iterations, enqueue, plan) * 1e6;
}

// GPU us the GEMV adds after `pre` (t_pre: pre alone), over the rotated sets (cold: each call's weights
// come from HBM) or set 0 every time (L2-hot).
double gemv_after_us(Bench& b, int copies, const Pre& pre, const std::vector<std::vector<Mat>>& sets, bool cold,
                     double t_pre) {
  return graph_us(b, copies,
                  [&](int i) {
                    pre.enqueue(b);
                    b.gemv(sets[cold ? i : 0]);
                  }) -
         t_pre;
}

// The prefetch of `set` forked onto the side stream beside `pre` on the main one, joined before the GEMV
// (with_gemv) or the end.
void forked_prefetch(Bench& b, const std::vector<Mat>& set, const L2PrefetchConfig& c, double frac, const Pre& pre,
                     bool with_gemv) {
  BENCH_CUDA(cudaEventRecord(b.fork, b.main));
  BENCH_CUDA(cudaStreamWaitEvent(b.side, b.fork, 0));
  b.prefetch(b.side, set, c, frac);
  BENCH_CUDA(cudaEventRecord(b.join, b.side));
  pre.enqueue(b);
  BENCH_CUDA(cudaStreamWaitEvent(b.main, b.join, 0));
  if (with_gemv) b.gemv(set);
}

const char* kind_name(L2PrefetchKind k) {
  switch (k) {
    case L2PrefetchKind::kBulk:
      return "bulk";
    case L2PrefetchKind::kLines:
      return "lines";
    case L2PrefetchKind::kLinesEvictLast:
      return "lines-last";
    case L2PrefetchKind::kLoads:
      return "loads";
  }
  return "?";
}

std::string cfg_name(const L2PrefetchConfig& c) {
  std::string s = kind_name(c.kind);
  s += "/b" + std::to_string(c.blocks);
  if (c.kind == L2PrefetchKind::kBulk)
    s += "/" + std::to_string((c.chunk_bytes ? c.chunk_bytes : 32768) >> 10) + "K";
  return s;
}

}  // namespace

int main() {
  Bench b;
  BENCH_CUDA(cudaSetDevice(0));
  int least = 0, greatest = 0;
  BENCH_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  BENCH_CUDA(cudaStreamCreateWithPriority(&b.main, cudaStreamNonBlocking, least));
  BENCH_CUDA(cudaStreamCreateWithPriority(&b.side, cudaStreamNonBlocking, greatest));
  BENCH_CUDA(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
  BENCH_CUDA(cudaEventCreateWithFlags(&b.join, cudaEventDisableTiming));
  b.sms = tf::cuda::current_sm_count();
  int l2 = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  std::printf("l2prefetch: %d SMs, L2 %.1f MB\n", b.sms, l2 / 1e6);
  BENCH_CUDA(cudaMalloc(&b.x, 16384 * 4));
  BENCH_CUDA(cudaMemset(b.x, 0, 16384 * 4));
  BENCH_CUDA(cudaMalloc(&b.out, 8 * 16384 * 4));
  BENCH_CUDA(cudaMalloc(&b.sink, 4));
  const size_t ws_bytes = size_t(64) << 20;
  BENCH_CUDA(cudaMalloc(&b.ws, ws_bytes));
  Pool busy_pool(size_t(100) << 20);
  b.busy_data = reinterpret_cast<const uint4*>(busy_pool.take(size_t(100) << 20));
  b.busy_n16 = (size_t(100) << 20) / 16;
  constexpr size_t kPoolBytes = size_t(480) << 20;  // > 400 MB of rotating copies: cold in a 50 MB L2
  Pool pool(kPoolBytes);

  const long long cyc = 2000;  // ~1 us of spin per small kernel at ~2 GHz (plus the launch gap)
  const std::vector<Pre> pres = {{"chain2", 2, cyc, 0}, {"chain8", 8, cyc, 0}, {"busy64", -1, 0, 64}};
  std::vector<L2PrefetchConfig> cfgs;
  for (int blocks : {1, 4, 16}) cfgs.push_back({L2PrefetchKind::kBulk, blocks, 0});
  cfgs.push_back({L2PrefetchKind::kBulk, 4, size_t(128) << 10});
  for (int blocks : {32, 132}) cfgs.push_back({L2PrefetchKind::kLines, blocks, 0});
  cfgs.push_back({L2PrefetchKind::kLinesEvictLast, 132, 0});
  cfgs.push_back({L2PrefetchKind::kLoads, 132, 0});

  const std::vector<Shape> shapes = {{"o_proj 8192->4096", 4096, 8192, 1},
                                     {"4096->8192", 8192, 4096, 1},
                                     {"qkv 3x4096->8192", 8192, 4096, 3},
                                     {"shared down 2048->4096", 4096, 2048, 1}};
  for (const Shape& sh : shapes) {
    pool.reset();
    const Mat proto{nullptr, nullptr, sh.n, sh.k};
    const size_t set_bytes = (proto.code_bytes() + proto.scale_bytes() + 512) * sh.count;
    const int copies = int(kPoolBytes / set_bytes);
    std::vector<std::vector<Mat>> sets(copies);
    for (auto& s : sets)
      for (int j = 0; j < sh.count; ++j) {
        Mat m = proto;
        m.codes = pool.take(m.code_bytes());
        m.scales = pool.take(m.scale_bytes());
        s.push_back(m);
      }
    std::printf("\n== %s: %.1f MB per call, %d copies (%.0f MB)\n", sh.name, set_bytes / 1e6, copies,
                copies * set_bytes / 1e6);
    const double alone_cold = graph_us(b, copies, [&](int i) { b.gemv(sets[i]); });
    const double alone_hot = graph_us(b, copies, [&](int) { b.gemv(sets[0]); });
    std::printf("gemv back to back: cold %.2f us (%.0f GB/s), hot %.2f us (%.0f GB/s)\n", alone_cold,
                set_bytes / alone_cold / 1e3, alone_hot, set_bytes / alone_hot / 1e3);
    for (const L2PrefetchConfig& c : cfgs) {
      const double t = graph_us(b, copies, [&](int i) { b.prefetch(b.main, sets[i], c, 1.0); });
      std::printf("prefetch kernel alone %-16s %.2f us/call (issue rate %.0f GB/s)\n", cfg_name(c).c_str(), t,
                  set_bytes / t / 1e3);
    }
    if (&sh == &shapes[0]) {
      // How long a prefetch takes to land: the GEMV after a forked prefetch beside 1..16 spin kernels.
      for (const L2PrefetchConfig& c : {cfgs[1], cfgs[5]}) {
        std::printf("landing %s:", cfg_name(c).c_str());
        for (int chain : {1, 2, 4, 8, 16}) {
          const Pre pre{"", chain, cyc, 0};
          const double t_pre = graph_us(b, copies, [&](int) { pre.enqueue(b); });
          const double cold = gemv_after_us(b, copies, pre, sets, true, t_pre);
          const double pref =
              graph_us(b, copies, [&](int i) { forked_prefetch(b, sets[i], c, 1.0, pre, true); }) - t_pre;
          std::printf("  pre %.1f us: cold %.2f pref %.2f", t_pre, cold, pref);
        }
        std::printf("\n");
      }
    }
    for (const Pre& pre : pres) {
      const double t_pre = graph_us(b, copies, [&](int) { pre.enqueue(b); });
      const double cold = gemv_after_us(b, copies, pre, sets, true, t_pre);
      const double hot = gemv_after_us(b, copies, pre, sets, false, t_pre);
      std::printf("-- pre %s (%.1f us alone): gemv adds cold %.2f us, hot %.2f us\n", pre.name.c_str(), t_pre,
                  cold, hot);
      for (const L2PrefetchConfig& c : cfgs) {
        for (double frac : sh.count > 1 ? std::vector<double>{1.0, 0.5} : std::vector<double>{1.0}) {
          const double pre_forked =
              graph_us(b, copies, [&](int i) { forked_prefetch(b, sets[i], c, frac, pre, false); });
          const double pref =
              graph_us(b, copies, [&](int i) { forked_prefetch(b, sets[i], c, frac, pre, true); }) - t_pre;
          const double serial = graph_us(b, copies,
                                         [&](int i) {
                                           b.prefetch(b.main, sets[i], c, frac);
                                           pre.enqueue(b);
                                           b.gemv(sets[i]);
                                         }) -
                                t_pre;
          std::printf(
              "   %-16s frac %.1f: pref %.2f us (saves %+.2f; pre+prefetch %.1f us) serial %.2f us (saves "
              "%+.2f)\n",
              cfg_name(c).c_str(), frac, pref, cold - pref, pre_forked, serial, cold - serial);
        }
      }
    }
  }
  return 0;
}
