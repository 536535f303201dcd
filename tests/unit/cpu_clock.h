// CPU time for the tests' speed bounds: unlike the wall clock, not stretched by whatever else
// runs on a loaded CI machine.
#pragma once

#include <time.h>

namespace tf::test {

// Seconds of CPU time on `clock`: CLOCK_THREAD_CPUTIME_ID (the calling thread) or
// CLOCK_PROCESS_CPUTIME_ID (all the process's threads).
inline double cpu_seconds(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace tf::test
