// Collective checks shared by comm_worker (one rank per process) and the
// in-process communicator tests (one rank per thread).
//
// Every rank can regenerate every other rank's data (seeded by rank), so each
// rank computes the exact expected result on its own: sums in rank order in
// f32 (the Communicator contract), bf16 rounded once at the end, gathers and
// broadcasts bit for bit. Values span many exponents so that a different
// summation order would change the bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tf::comm_test {

inline std::vector<float> rank_data(uint64_t seed, int rank, size_t n, int salt) {
  std::mt19937_64 gen(seed * 1000003u + static_cast<uint64_t>(rank) * 7919u + static_cast<uint64_t>(salt));
  std::vector<float> v(n);
  for (auto& x : v) {
    uint64_t bits = gen();
    float mantissa = static_cast<float>(bits & 0xffffffu) / 16777216.0f - 0.5f;  // [-0.5, 0.5)
    int exponent = static_cast<int>((bits >> 24) % 21) - 10;                     // 2^-10 .. 2^10
    x = std::ldexp(mantissa, exponent);
  }
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

inline Status mismatch(const std::string& what, int rank, size_t index, double got, double want) {
  return internal_error("rank " + std::to_string(rank) + ": " + what + ": element " + std::to_string(index) +
                        " is " + std::to_string(got) + ", expected " + std::to_string(want));
}

inline Status check_all_reduce_f32(Communicator& comm, uint64_t seed, size_t n, int salt) {
  const int me = comm.rank();
  std::vector<float> expected = rank_data(seed, 0, n, salt);
  for (int r = 1; r < comm.world_size(); ++r) {
    std::vector<float> other = rank_data(seed, r, n, salt);
    for (size_t i = 0; i < n; ++i) expected[i] += other[i];
  }
  Tensor t = Tensor::from_floats({static_cast<int64_t>(n)}, rank_data(seed, me, n, salt));
  TF_RETURN_IF_ERROR(comm.all_reduce_sum(t));
  const float* got = t.data<float>();
  for (size_t i = 0; i < n; ++i) {
    if (float_bits(got[i]) != float_bits(expected[i])) return mismatch("all_reduce f32", me, i, got[i], expected[i]);
  }
  return Status::ok();
}

inline Status check_all_reduce_bf16(Communicator& comm, uint64_t seed, size_t n, int salt) {
  const int me = comm.rank();
  std::vector<float> acc(n, 0.0f);
  for (int r = 0; r < comm.world_size(); ++r) {
    std::vector<uint16_t> other = to_bf16(rank_data(seed, r, n, salt));
    for (size_t i = 0; i < n; ++i) acc[i] = r == 0 ? bf16_to_float(other[i]) : acc[i] + bf16_to_float(other[i]);
  }
  std::vector<uint16_t> mine = to_bf16(rank_data(seed, me, n, salt));
  Tensor t = Tensor::empty({static_cast<int64_t>(n)}, DType::kBF16);
  if (n) std::memcpy(t.raw(), mine.data(), n * 2);
  TF_RETURN_IF_ERROR(comm.all_reduce_sum(t));
  const uint16_t* got = t.data<uint16_t>();
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != float_to_bf16(acc[i])) return mismatch("all_reduce bf16", me, i, bf16_to_float(got[i]), acc[i]);
  }
  return Status::ok();
}

// A transposed (non-contiguous) view: the communicator must reduce through it.
inline Status check_all_reduce_strided(Communicator& comm, uint64_t seed) {
  const int me = comm.rank();
  const int64_t rows = 33, cols = 17;
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> expected = rank_data(seed, 0, n, 99);
  for (int r = 1; r < comm.world_size(); ++r) {
    std::vector<float> other = rank_data(seed, r, n, 99);
    for (size_t i = 0; i < n; ++i) expected[i] += other[i];
  }
  Tensor base = Tensor::from_floats({rows, cols}, rank_data(seed, me, n, 99));
  Tensor view = base.transpose(0, 1);
  TF_RETURN_IF_ERROR(comm.all_reduce_sum(view));
  const float* got = base.data<float>();
  for (size_t i = 0; i < n; ++i) {
    if (float_bits(got[i]) != float_bits(expected[i])) return mismatch("all_reduce strided", me, i, got[i], expected[i]);
  }
  return Status::ok();
}

inline Status check_all_gather(Communicator& comm, uint64_t seed, size_t n, int salt) {
  const int me = comm.rank();
  const int world = comm.world_size();
  Tensor in = Tensor::from_floats({static_cast<int64_t>(n)}, rank_data(seed, me, n, salt));
  Tensor out = Tensor::zeros({world, static_cast<int64_t>(n)}, DType::kF32);
  TF_RETURN_IF_ERROR(comm.all_gather(in, out));
  for (int r = 0; r < world; ++r) {
    std::vector<float> want = rank_data(seed, r, n, salt);
    const float* got = out.data<float>() + static_cast<size_t>(r) * n;
    for (size_t i = 0; i < n; ++i) {
      if (float_bits(got[i]) != float_bits(want[i])) return mismatch("all_gather row " + std::to_string(r), me, i, got[i], want[i]);
    }
  }
  // Odd byte counts (u8) and a bf16 gather into a [world * n] output.
  Tensor bytes_in = Tensor::empty({13}, DType::kU8);
  for (int i = 0; i < 13; ++i) bytes_in.data<uint8_t>()[i] = static_cast<uint8_t>(me * 31 + i);
  Tensor bytes_out = Tensor::zeros({world * 13}, DType::kU8);
  TF_RETURN_IF_ERROR(comm.all_gather(bytes_in, bytes_out));
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < 13; ++i) {
      uint8_t got = bytes_out.data<uint8_t>()[r * 13 + i];
      if (got != static_cast<uint8_t>(r * 31 + i)) return mismatch("all_gather u8", me, static_cast<size_t>(r * 13 + i), got, r * 31 + i);
    }
  }
  return Status::ok();
}

inline Status check_broadcast(Communicator& comm, uint64_t seed, size_t n) {
  const int me = comm.rank();
  for (int root = 0; root < comm.world_size(); ++root) {
    // Every rank starts from its own data; afterwards all hold root's.
    Tensor t = Tensor::from_floats({static_cast<int64_t>(n)}, rank_data(seed, me, n, 50 + root));
    TF_RETURN_IF_ERROR(comm.broadcast(t, root));
    std::vector<float> want = rank_data(seed, root, n, 50 + root);
    for (size_t i = 0; i < n; ++i) {
      float got = t.data<float>()[i];
      if (float_bits(got) != float_bits(want[i])) return mismatch("broadcast from " + std::to_string(root), me, i, got, want[i]);
    }
  }
  return Status::ok();
}

// The whole suite; every rank calls it with the same seed.
inline Status run_all_checks(Communicator& comm, uint64_t seed) {
  // 300001 > the Gloo backend's 2^18-element chunk, so chunking is covered.
  const size_t sizes[] = {1, 7, 4097, 300001};
  int salt = 0;
  for (size_t n : sizes) {
    TF_RETURN_IF_ERROR(check_all_reduce_f32(comm, seed, n, ++salt));
    TF_RETURN_IF_ERROR(check_all_reduce_bf16(comm, seed, n, ++salt));
    TF_RETURN_IF_ERROR(check_all_gather(comm, seed, n, ++salt));
  }
  TF_RETURN_IF_ERROR(check_all_reduce_strided(comm, seed));
  TF_RETURN_IF_ERROR(check_broadcast(comm, seed, 1000));
  TF_RETURN_IF_ERROR(comm.barrier());
  // Empty tensors are a no-op on every rank.
  Tensor empty = Tensor::empty({0}, DType::kF32);
  TF_RETURN_IF_ERROR(comm.all_reduce_sum(empty));
  return comm.barrier();
}

}  // namespace tf::comm_test
