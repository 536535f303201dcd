// The MLA sparse decode kernels' shared layout (cuda_mla_decode.cu): block and tile sizes and the
// workspace the three steps pass through. Included by cuda_mla_decode.cu and its headers only.
#pragma once

#include <cstdint>

#include "kernels/cuda/pdl.cuh"

namespace tf::cuda {
namespace {

constexpr int kPrepThreads = 512;
constexpr int kMaxIndices = 16384;  // prep sorts a row's indices in shared memory (64 KB)
constexpr int kTile = 32;           // tokens per tile (a lane per token in the scores)
constexpr int kGroup = 8;           // heads per split block (a warp per head in the softmax)
constexpr int kThreads = 256;       // split block: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunks = 16;   // chunks per row (workspace: rows x chunks x H x (R + 2) floats)
constexpr int kMaxWidth = 1024;  // R: a thread per 4 channels of the output

static_assert(kGroup == kWarps, "the softmax gives a warp to each head of the group");

struct Workspace {
  int* count;       // [rows]
  int64_t* offset;  // [rows, W] element offset of each kept token's latent row
  float* tscale;    // [rows, W] its fp8 scale (1 otherwise)
  float* part_o;    // [rows, chunks, H, R] unnormalised chunk outputs
  float* part_ml;   // [rows, chunks, H, 2] chunk max and sum
};

}  // namespace
}  // namespace tf::cuda
