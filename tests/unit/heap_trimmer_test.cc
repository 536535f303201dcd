// HEAP_TRIM (engine/heap_trimmer.h, core/heap_trim.h): memory a finished thread's arena still
// holds goes back to the system when trimmed, and the trimmer trims only while the allocator holds
// more than its threshold free.
#include "engine/heap_trimmer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/heap_trim.h"
#include "eventually.h"

namespace tf {
namespace {

using namespace std::chrono_literals;

int64_t resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? int64_t{resident} * sysconf(_SC_PAGESIZE) : -1;
}

// What a request's worker leaves behind: 128 MiB of 64 KiB blocks (below the mmap threshold, so
// they live in the thread's arena), every other one freed, so the free half is holes that the
// allocator does not give back by itself.
TEST(HeapTrim, FreedArenaMemoryGoesBackToTheSystem) {
  constexpr size_t kBlock = 64 << 10, kBlocks = 2048;
  std::vector<void*> kept;
  std::thread worker([&] {
    std::vector<void*> blocks(kBlocks);
    for (auto& b : blocks) {
      b = std::malloc(kBlock);
      std::memset(b, 1, kBlock);
    }
    for (size_t i = 0; i < kBlocks; ++i) {
      if (i % 2 == 1)
        std::free(blocks[i]);
      else
        kept.push_back(blocks[i]);
    }
  });
  worker.join();
  EXPECT_GE(heap_free_bytes(), int64_t{48} << 20);
  const int64_t before = resident_bytes();
  trim_heap();
  const int64_t after = resident_bytes();
  ASSERT_GT(before, 0);
  EXPECT_LE(after, before - (int64_t{40} << 20))
      << "resident " << (before >> 20) << " -> " << (after >> 20) << " MiB";
  for (void* b : kept) std::free(b);
}

TEST(HeapTrimmer, TrimsOnlyAboveItsThreshold) {
  std::atomic<int64_t> free_bytes{10};
  std::atomic<int> trims{0};
  auto trimmer = HeapTrimmer::start({.threshold_bytes = 50,
                                     .period = 5ms,
                                     .free_bytes = [&] { return free_bytes.load(); },
                                     .trim =
                                         [&] {
                                           ++trims;
                                           free_bytes = 0;  // as a real trim leaves it
                                         }});
  ASSERT_NE(trimmer, nullptr);
  std::this_thread::sleep_for(100ms);  // ~20 readings under the threshold
  EXPECT_EQ(trims.load(), 0);
  free_bytes = 100;
  EXPECT_TRUE(test::eventually([&] { return trims.load() == 1; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(trims.load(), 1);
  EXPECT_EQ(trimmer->trims(), 1);
}

TEST(HeapTrimmer, ZeroThresholdIsOff) { EXPECT_EQ(HeapTrimmer::start({.threshold_bytes = 0}), nullptr); }

}  // namespace
}  // namespace tf
