// Kernel timeline of any CUDA program, graph-replayed kernels included, for the GPU machine
// (which has no Nsight Systems): a CUPTI injection library. Load it with
//   CUDA_INJECTION64_PATH=libtf_cupti_trace.so TF_KERNEL_TRACE=trace.csv <program>
// and the start/end (GPU ns), graph id and node, grid and demangled name of every kernel (copies
// and memsets too) go to trace.csv when the program exits; scripts/device/kernel_timeline.py
// sums them per decode step.
// TF_KERNEL_TRACE_MAX caps the records kept (default 2,000,000).
#include <cupti.h>
#include <cxxabi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end, graph_node;
  uint32_t graph_id, correlation, stream;
  int32_t grid, block;
  std::string name;
};

std::mutex g_mutex;
std::vector<KernelRecord> g_records;
size_t g_max_records = 2000000;
std::atomic<bool> g_written{false};

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

std::string demangled(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  for (char& c : s)
    if (c == ',' || c == '\n') c = ';';  // one CSV field
  return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (g_records.size() >= g_max_records) continue;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      g_records.push_back({k->start, k->end, k->graphNodeId, k->graphId, k->correlationId, k->streamId,
                           k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ, demangled(k->name)});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      // Copies appear as kernels named "memcpy <kind> <bytes>B" (grid and block 0).
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      static const char* const kinds[] = {"?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
      const char* kind = m->copyKind < sizeof(kinds) / sizeof(kinds[0]) ? kinds[m->copyKind] : "?";
      g_records.push_back({m->start, m->end, m->graphNodeId, m->graphId, m->correlationId, m->streamId, 0, 0,
                           std::string("memcpy ") + kind + " " + std::to_string(m->bytes) + "B"});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      g_records.push_back({m->start, m->end, m->graphNodeId, m->graphId, m->correlationId, m->streamId, 0, 0,
                           "memset " + std::to_string(m->bytes) + "B"});
    }
  }
  std::free(buffer);
}

void write_trace() {
  if (g_written.exchange(true)) return;
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("TF_KERNEL_TRACE");
  FILE* f = std::fopen(path && *path ? path : "kernel_trace.csv", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(f, "start_ns,end_ns,graph_id,graph_node,correlation,stream,grid,block,name\n");
  for (const KernelRecord& r : g_records)
    std::fprintf(f, "%llu,%llu,%u,%llu,%u,%u,%d,%d,%s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.graph_id, static_cast<unsigned long long>(r.graph_node),
                 r.correlation, r.stream, r.grid, r.block, r.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "[kernel-trace] %zu kernels written\n", g_records.size());
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  if (const char* cap = std::getenv("TF_KERNEL_TRACE_MAX")) g_max_records = std::strtoull(cap, nullptr, 10);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "[kernel-trace] CUPTI activity tracing could not be enabled\n");
    return 0;
  }
  std::atexit(write_trace);
  return 1;
}
