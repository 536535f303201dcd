// See open_files.h.
#include "server/open_files.h"

#include <sys/resource.h>

#include <algorithm>

namespace tf::server {

size_t raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  const rlim_t want = std::min<rlim_t>(lim.rlim_max, rlim_t{1} << 20);
  if (lim.rlim_cur < want) {
    rlimit raised = lim;
    raised.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? size_t{1} << 20 : static_cast<size_t>(lim.rlim_cur);
}

}  // namespace tf::server
