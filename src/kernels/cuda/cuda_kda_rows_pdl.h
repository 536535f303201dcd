// Whether the decode-row KDA recurrence (kda_recurrent_state_rows) launches with programmatic
// dependent launch behind the q/k/v conv (kda_conv_qkv_rows): the conv lets its dependents launch
// at its start, and the recurrence loads its rows' [H, Dk, Dv] states (4 MiB a row at the model's
// shape; written only by the previous step's recurrence) while the conv runs, then waits for it
// before reading q, k, v, g and beta. The same arithmetic, so the same bits either way. On unless
// TF_KDA_REC_PDL=0 (read once); benchmarks flip it.
#pragma once

#include <atomic>

namespace tf::cuda {

std::atomic<bool>& kda_recurrent_rows_pdl();

}  // namespace tf::cuda
