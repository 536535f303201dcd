// The process's limit on open files bounds how many connections the HTTP server can hold
// (one descriptor each). Distributions start processes at a soft limit of 1,024 under a
// much higher hard limit; servers raise the soft one, as nginx and Redis do.
#pragma once

#include <cstddef>

namespace tf::server {

// Raises the soft RLIMIT_NOFILE to the hard limit (at most 1 << 20) and returns the soft
// limit in force afterwards.
size_t raise_open_file_limit();

}  // namespace tf::server
