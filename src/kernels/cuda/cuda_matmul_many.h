// Ops::matmul_many on the GPU: several projections of one input in as few launches
// as the formats allow (issue #8: a batch-1 decode token launched ~1,300 kernels, and
// a GEMV over a small matrix never reaches HBM speed on its own).
//
// At decode rows (m <= ctx.exact_rows) the matrices are grouped: quantized ones by
// (format, K) into quant_gemv_many (quant_gemv.h), dense ones by weight dtype into
// small_gemm_many (small_gemm.h). Both keep every matrix's own launch plan, so each
// output has the bits of matmul on that matrix alone. Everything else (prefill rows,
// a group of one, outputs that overlap x, arguments matmul would refuse) runs
// through matmul one by one, which also raises matmul's errors.
//
// Given a side stream (side_stream.h; none open), the launches after the first run on it,
// beside the first (decode: a KDA layer's q4 q/k/v group beside its bf16 gate inputs), and
// are joined before the call returns. `concurrent` as SideStream::begin.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "kernels/api/matrix.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

class SideStream;

void matmul_many(CudaContext& ctx, const std::vector<Tensor*>& outs, const Tensor& x,
                 const std::vector<const Matrix*>& ws, SideStream* side = nullptr, bool concurrent = true);

}  // namespace tf::cuda
