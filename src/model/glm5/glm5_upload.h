// Moving GLM-5.3-Flash weights onto the backend's device once, at load.
//
// load_glm5_weights() reads and shards every tensor on the host; the model then
// calls upload_glm5_weights() so that each one lives where the Ops compute.
// Tensors already on that device (the CPU backend: everything) are kept as they
// are, so the CPU path copies nothing. EXL3 experts keep their own storage: the
// backend's exl3_matmul decides where those tensors must be.
#pragma once

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "model/glm5/glm5_weights.h"

namespace tf {

// The device `ops` allocates on (asked once by allocating an empty tensor).
Device ops_device(Ops& ops);

// `t` itself when it is null or already packed on `device`, else a packed copy there.
Tensor to_ops_device(Ops& ops, Device device, const Tensor& t);

// Replaces every tensor of `w` by its copy on the ops device; errors name the tensor.
Status upload_glm5_weights(Glm5Weights& w, Ops& ops);

}  // namespace tf
