// The checks every backend's Ops::sample_rows makes on its arguments before any row is
// sampled (kernels/api/sample_rows.h): as many results and parameter sets as rows, and no
// scored token past its row. Backends add their own device and dtype checks.
#pragma once

#include <span>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/sample_rows.h"

namespace tf {

inline Status check_sample_rows_call(size_t results, std::span<const Tensor> rows,
                                     std::span<const SampleRowParams> params) {
  if (results != rows.size() || params.size() != rows.size())
    return invalid_argument("sample_rows: " + std::to_string(rows.size()) + " rows, " +
                            std::to_string(params.size()) + " parameter sets and " + std::to_string(results) +
                            " results must agree");
  for (size_t k = 0; k < rows.size(); ++k)
    if (params[k].scored_token >= rows[k].numel())
      return invalid_argument("sample_rows: scored token " + std::to_string(params[k].scored_token) +
                              " is past its row of " + std::to_string(rows[k].numel()));
  return Status::ok();
}

}  // namespace tf
