// Matrix: a projection weight W [N, K] (out = x · W^T) as Ops::matmul takes it:
// either a dense Tensor (f32 / bf16) or a quantized one. Implicitly constructible
// from a Tensor, so model code that holds plain Tensors keeps compiling.
//
// Quantized formats (both store W row-major, one output channel per row):
//
//   kFp8Block  codes  f8_e4m3 [N, K]
//              scales f32     [ceil(N/128), ceil(K/128)]
//              w[n, k] = e4m3(codes[n, k]) * scales[n/128, k/128]
//              This is the official GLM-5.3-Flash FP8 release's layout (`weight`
//              + `weight_scale_inv`, glm53-checkpoint-facts.md §1.4): its routed
//              experts are served from their own bytes (Fp8ExpertStack, a stack of
//              these), and DENSE=fp8 re-quantizes the dense matrices into it; the
//              last block row or column may be partial.
//
//   kQ4        codes  u8  [N, G*32], G = ceil(K/64) groups of 64 along K
//              scales f16 [N, G]
//              Symmetric 4-bit, no zero point: byte b of group g holds element
//              k = 64g + 2b in its low nibble and 64g + 2b + 1 in its high nibble,
//              each stored as q + 8 (q in -8..7); w = q * scale. Elements past K
//              in the last group are stored as q = 0. Symmetric keeps the GPU
//              inner loop to one FMA per weight (no zero point to subtract per
//              group) and groups of 64 bound the error; the quantizer searches
//              each group's scale (model/dense_quant.h).
//
// Like Exl3Weight, the struct only describes memory: codes / scales may be views
// into a mapped checkpoint or device memory that someone else keeps alive.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

// (The values travel in the tensor-parallel model setup: keep them.)
enum class MatrixFormat : uint8_t { kDense = 0, kFp8Block = 1, kQ4 = 2 };

// "dense", "fp8", "q4".
const char* matrix_format_name(MatrixFormat f);

inline constexpr int64_t kFp8BlockSize = 128;  // FP8 scale blocks: 128 x 128
inline constexpr int64_t kQ4Group = 64;        // q4: weights per scale along K
inline constexpr int64_t kQ4GroupBytes = kQ4Group / 2;

class Matrix {
 public:
  Matrix() = default;
  Matrix(Tensor dense) : dense_(std::move(dense)) {}  // NOLINT: implicit by design (see the top)

  // Quantized matrices of logical shape [n, k]; no checks here (check_matrix does them).
  static Matrix fp8_block(Tensor codes, Tensor scales);
  static Matrix q4(Tensor codes, Tensor scales, int64_t k);

  MatrixFormat format() const { return format_; }
  bool is_dense() const { return format_ == MatrixFormat::kDense; }
  const Tensor& dense() const { return dense_; }   // kDense only
  const Tensor& codes() const { return codes_; }   // quantized only
  const Tensor& scales() const { return scales_; } // quantized only

  // Tensor-like queries on the logical [N, K] matrix (dense: the tensor's own).
  bool is_null() const { return is_dense() ? dense_.is_null() : codes_.is_null(); }
  int dim() const { return is_dense() ? dense_.dim() : 2; }
  int64_t size(int d) const;
  Shape shape() const { return is_dense() ? dense_.shape() : Shape{rows_, cols_}; }
  Device device() const { return is_dense() ? dense_.device() : codes_.device(); }
  // Storage dtype: the dense tensor's; f8_e4m3 for fp8; u8 for q4.
  DType dtype() const { return is_dense() ? dense_.dtype() : codes_.dtype(); }
  // Bytes a matmul streams (codes + scales).
  int64_t nbytes() const;
  std::string describe() const;  // "q4[4096, 12288] cpu" / the tensor's

  // The same matrix with codes and scales (or the dense tensor) replaced, e.g. by
  // device copies; the format and logical shape stay.
  Matrix with_storage(Tensor a, Tensor b = Tensor()) const;

 private:
  MatrixFormat format_ = MatrixFormat::kDense;
  Tensor dense_;
  Tensor codes_, scales_;
  int64_t rows_ = 0, cols_ = 0;
};

// Structural check before a kernel touches a quantized matrix: dtypes, packing,
// codes and scales shapes agree with the logical [N, K]. `what` names it in errors.
Status check_matrix(const Matrix& m, const std::string& what);

// Host dequantization of rows [r0, r1) into f32 `dst` [(r1-r0), K] (packed).
// Dense f32/bf16 matrices are converted; quantized ones follow the layouts above.
void dequantize_matrix_rows(const Matrix& m, int64_t r0, int64_t r1, float* dst);
// The whole matrix as a packed f32 host tensor (tests, reports).
Tensor dequantize_matrix(const Matrix& m);

}  // namespace tf
