// What the C allocator holds free, and giving it back to the system.
//
// Why: glibc keeps the memory a thread's arena once needed. A request that ends in a 400 after
// tokenizing a 20 MB prompt (a 100,000-tool list) leaves its HTTP worker's arena ~0.8 GB larger for
// good, and the arenas (up to 8 per core) multiply it: a hostile-input sweep took the server from
// 0.1 to 9 GB of RSS while it held nothing. malloc_trim(0) hands the free pages of every arena back.
#pragma once

#include <cstdint>

namespace tf {

// Bytes the allocator holds free in its arenas (0 where that cannot be read).
int64_t heap_free_bytes();

// Returns the allocator's free pages to the system (a no-op where the allocator cannot).
void trim_heap();

}  // namespace tf
