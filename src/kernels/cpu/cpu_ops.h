// The CPU reference backend: fp32 everywhere, rows split over ThreadPool::global().
#pragma once

#include <memory>

#include "kernels/api/ops.h"

namespace tf {

std::unique_ptr<Ops> make_cpu_ops();

}  // namespace tf
