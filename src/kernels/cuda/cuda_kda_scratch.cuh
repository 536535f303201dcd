// What the KDA chunked prefill's intra-chunk kernels (cuda_kda_chunked.cu,
// cuda_kda_intra_mma.cuh) hand the state pass, and what the split state pass
// (cuda_kda_state_split.cuh) hands its output kernel: one (chunk, head)'s slot of scratch.
#pragma once

#include <cstdint>

namespace tf::cuda::kda {

constexpr int kC = 64;   // tokens per chunk (the reference's chunk size)
constexpr int kD = 128;  // scratch width: Dk and Dv are padded to this

// Scratch of one (chunk, head), in floats; rows past the chunk's end and channels past
// Dk / Dv are zero.
constexpr int64_t kOffW = 0;                    // -w [C, D]
constexpr int64_t kOffU = kOffW + kC * kD;      // u [C, D] (the split state pass: v_new)
constexpr int64_t kOffQg = kOffU + kC * kD;     // q e^G [C, D]
constexpr int64_t kOffKd = kOffQg + kC * kD;    // k e^(G_last - G) [C, D]
constexpr int64_t kOffP = kOffKd + kC * kD;     // P [C, C] (zero above the diagonal)
constexpr int64_t kOffDecay = kOffP + kC * kC;  // e^G_last [D]
constexpr int64_t kOffS = kOffDecay + kD;       // the state at the chunk's start [Dk, Dv] (split state pass)
constexpr int64_t kPer = kOffS + kD * kD;       // 53,376 floats (a multiple of 8: 32-byte aligned)

}  // namespace tf::cuda::kda
