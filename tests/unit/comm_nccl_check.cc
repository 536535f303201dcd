// comm_nccl_check: the exact-result suite (comm_checks.h) and the dead-rank
// test for the NCCL communicator, one process per GPU. It needs GPUs, so it is
// a program to run by hand on a GPU machine, not a CTest:
//
//   comm_nccl_check --world 2            # ranks 0..1 on cuda:0..1, exits 0 on success
//   comm_nccl_check --world 2 --kill 1   # SIGKILLs rank 1 mid all-reduce; the others
//                                        # must exit with kUnavailable within 10 s
//   comm_nccl_check --kernel 1           # the rank-order sum kernel for 1-4 ranks against
//                                        # a host reference, bit for bit (one GPU)
//
// The checks run on host tensors through an adapter that copies them to the
// device, calls the NCCL communicator and copies the result back.
#include <cuda_runtime_api.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl_rank_order_sum.h"
#include "comm_checks.h"

namespace tf {
namespace {

using Clock = std::chrono::steady_clock;

// Host tensors in, host tensors out; the collective itself runs on the device.
class HostViaDevice final : public Communicator {
 public:
  explicit HostViaDevice(Communicator& inner, int device) : inner_(inner), device_(device) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  const char* backend_name() const override { return inner_.backend_name(); }

  Status all_reduce_sum(Tensor& t) override {
    Tensor host = t.contiguous();
    TF_ASSIGN_OR_RETURN(Tensor dev, upload(host));
    TF_RETURN_IF_ERROR(inner_.all_reduce_sum(dev));
    TF_RETURN_IF_ERROR(inner_.flush());  // all_reduce_sum is deferred on NCCL
    TF_RETURN_IF_ERROR(download(dev, host));
    t.copy_from(host);
    return Status::ok();
  }
  Status all_gather(const Tensor& in, Tensor& out) override {
    TF_ASSIGN_OR_RETURN(Tensor dev_in, upload(in.contiguous()));
    Tensor host_out = out.contiguous();
    TF_ASSIGN_OR_RETURN(Tensor dev_out, upload(host_out));
    TF_RETURN_IF_ERROR(inner_.all_gather(dev_in, dev_out));
    TF_RETURN_IF_ERROR(download(dev_out, host_out));
    out.copy_from(host_out);
    return Status::ok();
  }
  Status broadcast(Tensor& t, int root) override {
    Tensor host = t.contiguous();
    TF_ASSIGN_OR_RETURN(Tensor dev, upload(host));
    TF_RETURN_IF_ERROR(inner_.broadcast(dev, root));
    TF_RETURN_IF_ERROR(download(dev, host));
    t.copy_from(host);
    return Status::ok();
  }
  Status barrier() override { return inner_.barrier(); }
  Status flush() override { return inner_.flush(); }

 private:
  Expected<Tensor> upload(const Tensor& host) {
    void* p = nullptr;
    size_t bytes = std::max<size_t>(host.nbytes(), 1);
    if (cudaMalloc(&p, bytes) != cudaSuccess) return resource_exhausted("cudaMalloc failed");
    auto storage = std::make_shared<Storage>(p, bytes, Device::cuda(device_), [](void* q) { cudaFree(q); });
    if (host.nbytes() && cudaMemcpy(p, host.raw(), host.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess) {
      return internal_error("upload failed");
    }
    Tensor dev = Tensor::on_storage(storage, 0, host.shape(), host.dtype());
    return dev;
  }
  Status download(const Tensor& dev, Tensor& host) {
    if (dev.nbytes() && cudaMemcpy(host.raw(), dev.raw(), dev.nbytes(), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return internal_error("download failed");
    }
    return Status::ok();
  }
  Communicator& inner_;
  int device_;
};

// One rank (a forked child). Exit codes as comm_worker: 0 ok, 1 failure, 2 kUnavailable.
int run_rank(int rank, int world, int port, int port_fd, int ready_fd, bool loop) {
  CommOptions o;
  o.backend = CommBackend::kNccl;
  o.rank = rank;
  o.world_size = world;
  o.rendezvous = "127.0.0.1:" + std::to_string(port);
  o.timeout = std::chrono::seconds(120);
  o.on_listening = [port_fd](int p) {
    std::string line = std::to_string(p) + "\n";
    [[maybe_unused]] ssize_t n = ::write(port_fd, line.data(), line.size());
  };
  auto comm = make_communicator(o);
  if (!comm) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().to_string().c_str());
    return comm.status().code() == StatusCode::kUnavailable ? 2 : 1;
  }
  int device = 0;
  cudaGetDevice(&device);
  HostViaDevice c(**comm, device);
  Status s;
  if (!loop) {
    s = comm_test::run_all_checks(c, 11);
  } else {
    void* p = nullptr;
    cudaMalloc(&p, (1 << 16) * sizeof(float));
    cudaMemset(p, 0, (1 << 16) * sizeof(float));
    Tensor t = Tensor::view_of(p, {1 << 16}, DType::kF32, Device::cuda(device));
    for (int i = 0; s.is_ok(); ++i) {
      s = (*comm)->all_reduce_sum(t);
      if (i == 0 && s.is_ok() && ::write(ready_fd, "r", 1) != 1) return 1;
    }
  }
  if (!s.is_ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
    return s.code() == StatusCode::kUnavailable ? 2 : 1;
  }
  std::fprintf(stderr, "rank %d: all NCCL checks passed\n", rank);
  return 0;
}

// The device sum of `ranks` rows equals the host's rank-order f32 sum (and its
// single bf16 rounding) bit for bit.
int check_sum_kernel() {
  const size_t n = 100003;
  int failures = 0;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (bool bf16 : {false, true}) {
      std::vector<float> acc(n);
      std::vector<uint8_t> gathered;
      for (int r = 0; r < ranks; ++r) {
        std::vector<float> row = comm_test::rank_data(5, r, n, bf16);
        if (bf16) {
          std::vector<uint16_t> b = comm_test::to_bf16(row);
          for (size_t i = 0; i < n; ++i) acc[i] = r == 0 ? bf16_to_float(b[i]) : acc[i] + bf16_to_float(b[i]);
          gathered.insert(gathered.end(), reinterpret_cast<uint8_t*>(b.data()), reinterpret_cast<uint8_t*>(b.data() + n));
        } else {
          for (size_t i = 0; i < n; ++i) acc[i] = r == 0 ? row[i] : acc[i] + row[i];
          gathered.insert(gathered.end(), reinterpret_cast<uint8_t*>(row.data()), reinterpret_cast<uint8_t*>(row.data() + n));
        }
      }
      const size_t elem = bf16 ? 2 : 4;
      void *g = nullptr, *out = nullptr;
      cudaMalloc(&g, gathered.size());
      cudaMalloc(&out, n * elem);
      cudaMemcpy(g, gathered.data(), gathered.size(), cudaMemcpyHostToDevice);
      cudaError_t e = launch_rank_order_sum(g, ranks, n, out, bf16, nullptr);
      std::vector<uint8_t> got(n * elem);
      cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost);
      cudaFree(g);
      cudaFree(out);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        uint32_t want = bf16 ? float_to_bf16(acc[i]) : float_bits(acc[i]);
        uint32_t have = 0;
        std::memcpy(&have, got.data() + i * elem, elem);
        bad += have != want;
      }
      std::fprintf(stderr, "sum kernel, %d ranks, %s: %s, %zu of %zu elements differ\n", ranks, bf16 ? "bf16" : "f32",
                   e == cudaSuccess ? "launched" : cudaGetErrorString(e), bad, n);
      failures += (bad != 0 || e != cudaSuccess);
    }
  }
  std::fprintf(stderr, failures ? "FAILED\n" : "PASSED\n");
  return failures ? 1 : 0;
}

int main_impl(int argc, char** argv) {
  int world = 1, victim = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--world") world = std::atoi(argv[i + 1]);
    if (flag == "--kill") victim = std::atoi(argv[i + 1]);
    if (flag == "--kernel") return check_sum_kernel();
  }
  int port_pipe[2], ready_pipe[2];
  if (::pipe(port_pipe) != 0 || ::pipe(ready_pipe) != 0) return 1;
  std::vector<pid_t> pids;
  int port = 0;
  // No CUDA call in the parent: children are forked.
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_rank(rank, world, port, port_pipe[1], ready_pipe[1], victim >= 0));
    pids.push_back(pid);
    if (rank == 0) {
      char buf[16] = {0};
      pollfd p{port_pipe[0], POLLIN, 0};
      if (::poll(&p, 1, 60000) <= 0 || ::read(port_pipe[0], buf, sizeof(buf) - 1) <= 0) return 1;
      port = std::atoi(buf);
    }
  }
  Clock::time_point killed_at{};
  if (victim >= 0) {
    for (int ready = 0; ready < world;) {
      char c;
      pollfd p{ready_pipe[0], POLLIN, 0};
      if (::poll(&p, 1, 120000) <= 0 || ::read(ready_pipe[0], &c, 1) != 1) {
        std::fprintf(stderr, "not all ranks became ready\n");
        for (pid_t pid : pids) ::kill(pid, SIGKILL);
        return 1;
      }
      ++ready;
    }
    ::usleep(200000);
    killed_at = Clock::now();
    ::kill(pids[static_cast<size_t>(victim)], SIGKILL);
  }
  int failures = 0;
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    ::waitpid(pids[static_cast<size_t>(rank)], &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rank == victim) continue;
    int want = victim >= 0 ? 2 : 0;
    if (code != want) {
      std::fprintf(stderr, "rank %d exited with %d, expected %d\n", rank, code, want);
      ++failures;
    }
  }
  if (victim >= 0) {
    double s = std::chrono::duration<double>(Clock::now() - killed_at).count();
    std::fprintf(stderr, "survivors exited %.2f s after the kill\n", s);
    if (s >= 10.0) ++failures;
  }
  std::fprintf(stderr, failures ? "FAILED\n" : "PASSED\n");
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) { return tf::main_impl(argc, argv); }
