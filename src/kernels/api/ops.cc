// The op interface: defaults for the ops a backend may leave out.
#include "kernels/api/ops.h"

#include <string>

#include "core/status.h"

namespace tf {

void Ops::exl3_matmul(Tensor& /*out*/, const Tensor& /*x*/, const Exl3Weight& /*w*/) {
  throw StatusError(unimplemented(std::string(name()) + " backend: EXL3 weights (exl3_matmul)"));
}

}  // namespace tf
