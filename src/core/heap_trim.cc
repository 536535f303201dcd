// See heap_trim.h.
#include "core/heap_trim.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tf {

int64_t heap_free_bytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();  // sums every arena
  return static_cast<int64_t>(info.fordblks);
#else
  return 0;
#endif
}

void trim_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace tf
