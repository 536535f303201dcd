// Gloo communicator with one rank per thread in this process: the exact-result
// suite (comm_checks.h) and the argument checks that fail locally.
#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm_checks.h"

namespace tf {
namespace {

// Builds `world` Gloo communicators, one per thread, and runs body(comm) on each.
template <typename Body>
std::vector<Status> run_ranks(int world, Body body, std::chrono::milliseconds op_timeout = std::chrono::seconds(8)) {
  std::promise<int> port_promise;
  std::shared_future<int> port = port_promise.get_future().share();
  std::atomic<bool> announced{false};
  std::vector<Status> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions o;
      o.backend = CommBackend::kGloo;
      o.rank = rank;
      o.world_size = world;
      o.timeout = std::chrono::seconds(60);
      o.op_timeout = op_timeout;
      if (rank == 0) {
        o.rendezvous = "127.0.0.1:0";
        o.on_listening = [&](int p) {
          announced = true;
          port_promise.set_value(p);
        };
      } else {
        if (port.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
          results[static_cast<size_t>(rank)] = unavailable("rank 0 never listened");
          return;
        }
        o.rendezvous = "127.0.0.1:" + std::to_string(port.get());
      }
      auto comm = make_communicator(o);
      if (!comm) {
        if (rank == 0 && !announced) port_promise.set_value(-1);
        results[static_cast<size_t>(rank)] = comm.status();
        return;
      }
      EXPECT_STREQ((*comm)->backend_name(), "gloo");
      EXPECT_EQ((*comm)->rank(), rank);
      EXPECT_EQ((*comm)->world_size(), world);
      results[static_cast<size_t>(rank)] = body(**comm);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

TEST(GlooCommunicatorTest, ThreeRanksInThreadsComputeExactResults) {
  auto results = run_ranks(3, [](Communicator& c) { return comm_test::run_all_checks(c, 5); });
  for (const auto& s : results) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(GlooCommunicatorTest, OneRankIsTheIdentity) {
  auto results = run_ranks(1, [](Communicator& c) { return comm_test::run_all_checks(c, 6); });
  EXPECT_TRUE(results[0].is_ok()) << results[0].to_string();
}

TEST(GlooCommunicatorTest, BadArgumentsFailLocallyWithoutCommunicating) {
  auto results = run_ranks(2, [](Communicator& c) -> Status {
    Tensor ints = Tensor::zeros({4}, DType::kI32);
    Status s = c.all_reduce_sum(ints);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("i32") == std::string::npos) {
      return internal_error("i32 all_reduce: " + s.to_string());
    }
    Tensor t = Tensor::zeros({4}, DType::kF32);
    s = c.broadcast(t, 2);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("root 2") == std::string::npos) {
      return internal_error("broadcast root 2: " + s.to_string());
    }
    Tensor small = Tensor::zeros({5}, DType::kF32);
    s = c.all_gather(t, small);
    if (s.code() != StatusCode::kInvalidArgument) return internal_error("all_gather size: " + s.to_string());
    Tensor other_dtype = Tensor::zeros({8}, DType::kBF16);
    s = c.all_gather(t, other_dtype);
    if (s.code() != StatusCode::kInvalidArgument) return internal_error("all_gather dtype: " + s.to_string());
    Tensor on_gpu = Tensor::view_of(reinterpret_cast<void*>(0x1000), {4}, DType::kF32, Device::cuda(0));
    s = c.all_reduce_sum(on_gpu);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("not on the CPU") == std::string::npos) {
      return internal_error("device tensor: " + s.to_string());
    }
    // The communicator still works after rejected calls.
    return comm_test::check_all_reduce_f32(c, 3, 100, 1);
  });
  for (const auto& s : results) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST(GlooCommunicatorTest, NonContiguousGatherOutputIsFilled) {
  auto results = run_ranks(2, [](Communicator& c) -> Status {
    Tensor in = Tensor::from_floats({3}, {1.0f + c.rank(), 2.0f + c.rank(), 3.0f + c.rank()});
    Tensor storage = Tensor::zeros({3, 2}, DType::kF32);
    Tensor out = storage.transpose(0, 1);  // [2, 3], strided
    TF_RETURN_IF_ERROR(c.all_gather(in, out));
    std::vector<float> got = out.to_vector();
    std::vector<float> want = {1, 2, 3, 2, 3, 4};
    if (got != want) return internal_error("strided all_gather output is wrong");
    return Status::ok();
  });
  for (const auto& s : results) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

// A broken contract (ranks disagree on the size or on the call) ends in the
// same kInvalidArgument on every rank: no crash (Gloo would abort the process),
// no hang, and the communicator stays usable.
TEST(GlooCommunicatorTest, RanksThatDisagreeGetAnErrorNotACrash) {
  auto results = run_ranks(3, [](Communicator& c) -> Status {
    Tensor t = Tensor::zeros({c.rank() == 1 ? 3000 : 1000}, DType::kF32);
    Status s = c.all_reduce_sum(t);
    if (s.code() != StatusCode::kInvalidArgument ||
        s.message().find("rank 1: all_reduce_sum f32 x 3000") == std::string::npos) {
      return internal_error("mismatched sizes: " + s.to_string());
    }
    Tensor u = Tensor::zeros({4}, DType::kF32);
    Tensor gathered = Tensor::zeros({12}, DType::kF32);
    s = c.rank() == 0 ? c.broadcast(u, 0) : c.all_gather(u, gathered);
    if (s.code() != StatusCode::kInvalidArgument ||
        s.message().find("rank 0: broadcast f32 x 4 root 0; rank 1: all_gather") == std::string::npos) {
      return internal_error("mismatched calls: " + s.to_string());
    }
    Tensor empty_or_not = Tensor::zeros({c.rank() == 2 ? 0 : 5}, DType::kBF16);
    s = c.all_reduce_sum(empty_or_not);
    if (s.code() != StatusCode::kInvalidArgument) return internal_error("empty vs non-empty: " + s.to_string());
    // Still in sync and usable.
    return comm_test::check_all_reduce_bf16(c, 9, 257, 4);
  });
  for (const auto& s : results) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

// Two communicators of the same ranks from one rendezvous (make_communicators),
// as tensor-parallel CUDA serving builds Gloo + NCCL: both work, independently,
// and each counts its own calls (CommStats).
TEST(GlooCommunicatorTest, TwoCommunicatorsFromOneRendezvousAreIndependent) {
  constexpr int kWorld = 2;
  std::promise<int> port_promise;
  std::shared_future<int> port = port_promise.get_future().share();
  std::atomic<bool> announced{false};
  std::vector<Status> results(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions o;
      o.rank = rank;
      o.world_size = kWorld;
      o.timeout = std::chrono::seconds(60);
      if (rank == 0) {
        o.rendezvous = "127.0.0.1:0";
        o.on_listening = [&](int p) {
          announced = true;
          port_promise.set_value(p);
        };
      } else {
        if (port.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
          results[1] = unavailable("rank 0 never listened");
          return;
        }
        o.rendezvous = "127.0.0.1:" + std::to_string(port.get());
      }
      auto comms = make_communicators(o, {CommBackend::kGloo, CommBackend::kGloo});
      if (!comms) {
        if (rank == 0 && !announced) port_promise.set_value(-1);
        results[static_cast<size_t>(rank)] = comms.status();
        return;
      }
      results[static_cast<size_t>(rank)] = [&]() -> Status {
        if (comms->size() != 2) return internal_error("expected 2 communicators");
        Communicator& a = *(*comms)[0];
        Communicator& b = *(*comms)[1];
        // Interleaved calls on both: each pairs with its own peer.
        Tensor x = Tensor::from_floats({3}, {1.0f + rank, 2.0f, 3.0f});
        Tensor y = Tensor::from_floats({2}, {10.0f * (rank + 1), -1.0f});
        TF_RETURN_IF_ERROR(a.all_reduce_sum(x));
        TF_RETURN_IF_ERROR(b.all_reduce_sum(y));
        TF_RETURN_IF_ERROR(a.all_reduce_sum(x));
        if (x.to_vector() != std::vector<float>{6.0f, 8.0f, 12.0f}) return internal_error("a's sums are wrong");
        if (y.to_vector() != std::vector<float>{30.0f, -2.0f}) return internal_error("b's sum is wrong");
        Tensor gathered = Tensor::zeros({kWorld, 2}, DType::kF32);
        TF_RETURN_IF_ERROR(b.all_gather(y, gathered));
        const CommStats sa = a.stats(), sb = b.stats();
        if (sa.all_reduce_calls != 2 || sa.all_reduce_bytes != 2 * 3 * 4 || sa.all_gather_calls != 0)
          return internal_error("a's stats: " + std::to_string(sa.all_reduce_calls) + " calls, " +
                                std::to_string(sa.all_reduce_bytes) + " bytes");
        if (sb.all_reduce_calls != 1 || sb.all_reduce_bytes != 2 * 4 || sb.all_gather_calls != 1)
          return internal_error("b's stats: " + std::to_string(sb.all_reduce_calls) + " calls");
        if (!(sa.all_reduce_seconds > 0.0) || !(sb.all_gather_seconds > 0.0)) return internal_error("no time counted");
        return Status::ok();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < results.size(); ++r)
    EXPECT_TRUE(results[r].is_ok()) << "rank " << r << ": " << results[r].to_string();
}

}  // namespace
}  // namespace tf
