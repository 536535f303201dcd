// comm_nccl_check: the exact-result suite (comm_checks.h) and the dead-rank
// test for the NCCL communicator, one process per GPU. It needs GPUs, so it is
// a program to run by hand on a GPU machine, not a CTest:
//
//   comm_nccl_check --world 2            # ranks 0..1 on cuda:0..1, exits 0 on success
//   comm_nccl_check --world 2 --kill 1   # SIGKILLs rank 1 mid all-reduce; the others
//                                        # must exit with kUnavailable within 10 s
//   comm_nccl_check --kernel 1           # the rank-order sum kernel for 1-4 ranks against
//                                        # a host reference, bit for bit (one GPU)
//   comm_nccl_check --world 2 --graph 1  # all_reduce_sum / all_gather captured into CUDA
//                                        # graphs: replays equal the rank-order sum bit for
//                                        # bit; then the time per all-reduce of [rows, hidden]
//                                        # f32 (rows 1, 4, 64; --hidden, default 4096) in a
//                                        # graph of 24 (a 12-layer decode step's count) vs
//                                        # eager (deferred) calls
//   comm_nccl_check --world 2 --graph 1 --kill 1
//                                        # SIGKILLs rank 1 while the others replay graphs
//                                        # holding all-reduces, each replay watched by flush():
//                                        # the others must exit with kUnavailable within 10 s
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
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl_communicator.h"
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

// ---- --graph: collectives captured into CUDA graphs

Status cuda_ok(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return internal_error(what + ": " + cudaGetErrorString(e));
}

// A device buffer as a tensor of this rank's device (freed with the tensor).
Expected<Tensor> device_tensor(Shape shape, DType dtype, int device) {
  const int64_t n = shape_numel(shape);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  void* p = nullptr;
  TF_RETURN_IF_ERROR(cuda_ok(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc"));
  auto storage = std::make_shared<Storage>(p, bytes, Device::cuda(device), [](void* q) { cudaFree(q); });
  return Tensor::on_storage(storage, 0, shape, dtype);
}

// Records fn's work on `stream` into an instantiated graph.
Expected<cudaGraphExec_t> capture(cudaStream_t stream, const std::function<Status()>& fn) {
  TF_RETURN_IF_ERROR(cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture"));
  Status body = fn();
  cudaGraph_t graph = nullptr;
  Status end = cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture");
  if (!body.is_ok() || !end.is_ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return body.is_ok() ? end : body.with_context("capture");
  }
  cudaGraphExec_t exec = nullptr;
  Status inst = cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(graph);
  if (!inst.is_ok()) return inst;
  return exec;
}

// The expected bits of the rank-order sum of every rank's rank_data(seed, r, n, salt)
// (bf16: the inputs rounded to bf16, the f32 sum rounded once), as f32 or bf16 words.
std::vector<uint32_t> expected_sum(int world, uint64_t seed, size_t n, int salt, bool bf16) {
  std::vector<float> acc(n, 0.0f);
  for (int r = 0; r < world; ++r) {
    std::vector<float> row = comm_test::rank_data(seed, r, n, salt);
    for (size_t i = 0; i < n; ++i) {
      const float v = bf16 ? bf16_to_float(float_to_bf16(row[i])) : row[i];
      acc[i] = r == 0 ? v : acc[i] + v;
    }
  }
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16 ? float_to_bf16(acc[i]) : float_bits(acc[i]);
  return out;
}

Status upload_rank_data(Tensor& t, int rank, uint64_t seed, int salt) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> row = comm_test::rank_data(seed, rank, n, salt);
  if (t.dtype() == DType::kBF16) {
    std::vector<uint16_t> b = comm_test::to_bf16(row);
    return cuda_ok(cudaMemcpy(t.raw(), b.data(), n * 2, cudaMemcpyHostToDevice), "upload");
  }
  return cuda_ok(cudaMemcpy(t.raw(), row.data(), n * 4, cudaMemcpyHostToDevice), "upload");
}

Status compare_sum(const Tensor& t, int world, uint64_t seed, int salt, const std::string& what) {
  const size_t n = static_cast<size_t>(t.numel());
  const bool bf16 = t.dtype() == DType::kBF16;
  const std::vector<uint32_t> want = expected_sum(world, seed, n, salt, bf16);
  std::vector<uint8_t> got(n * t.element_size());
  TF_RETURN_IF_ERROR(cuda_ok(cudaMemcpy(got.data(), t.raw(), got.size(), cudaMemcpyDeviceToHost), "download"));
  for (size_t i = 0; i < n; ++i) {
    uint32_t have = 0;
    std::memcpy(&have, got.data() + i * t.element_size(), t.element_size());
    if (have != want[i]) {
      return internal_error(what + ": element " + std::to_string(i) + " of " + std::to_string(n) + " has bits " +
                            std::to_string(have) + ", the rank-order sum " + std::to_string(want[i]));
    }
  }
  return Status::ok();
}

// Replays of captured all-reduces (and an all-gather) equal the rank-order sum bit for
// bit, three replays running, with eager calls between them on the same communicator;
// then the timing. The communicator's stream is `stream` (set_stream).
Status graph_checks(Communicator& comm, cudaStream_t stream, int device, int64_t hidden) {
  const int me = comm.rank(), world = comm.world_size();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t rows : {int64_t{1}, int64_t{5}, int64_t{64}}) {
      const std::string what = std::string("graph all_reduce ") + dtype_name(dtype) + " [" + std::to_string(rows) +
                               " x " + std::to_string(hidden) + "]";
      const int salt = static_cast<int>(rows) + (dtype == DType::kBF16 ? 1000 : 0);
      TF_ASSIGN_OR_RETURN(Tensor src, device_tensor({rows, hidden}, dtype, device));
      TF_ASSIGN_OR_RETURN(Tensor work, device_tensor({rows, hidden}, dtype, device));
      TF_RETURN_IF_ERROR(upload_rank_data(src, me, 7, salt));
      TF_ASSIGN_OR_RETURN(cudaGraphExec_t exec, capture(stream, [&]() -> Status {
                            TF_RETURN_IF_ERROR(cuda_ok(
                                cudaMemcpyAsync(work.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream),
                                "copy"));
                            return comm.all_reduce_sum(work);
                          }));
      Status s;
      for (int replay = 0; replay < 3 && s.is_ok(); ++replay) {
        TF_RETURN_IF_ERROR(cuda_ok(cudaMemsetAsync(work.raw(), 0, work.nbytes(), stream), "memset"));
        s = cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
        if (s.is_ok()) s = comm.flush();
        if (s.is_ok()) s = compare_sum(work, world, 7, salt, what + " replay " + std::to_string(replay));
        // An eager, deferred all-reduce between replays (the eager steps of a server).
        if (s.is_ok()) s = upload_rank_data(work, me, 7, salt);
        if (s.is_ok()) s = comm.all_reduce_sum(work);
        if (s.is_ok()) s = comm.flush();
        if (s.is_ok()) s = compare_sum(work, world, 7, salt, what + " eager after replay " + std::to_string(replay));
      }
      cudaGraphExecDestroy(exec);
      TF_RETURN_IF_ERROR(s);
    }
  }
  // A captured all-gather (the logits of a graph step).
  {
    const int64_t n = 1000;
    TF_ASSIGN_OR_RETURN(Tensor in, device_tensor({n}, DType::kF32, device));
    TF_ASSIGN_OR_RETURN(Tensor out, device_tensor({world, n}, DType::kF32, device));
    TF_RETURN_IF_ERROR(upload_rank_data(in, me, 9, 3));
    TF_ASSIGN_OR_RETURN(cudaGraphExec_t exec, capture(stream, [&] { return comm.all_gather(in, out); }));
    TF_RETURN_IF_ERROR(cuda_ok(cudaMemsetAsync(out.raw(), 0, out.nbytes(), stream), "memset"));
    Status s = cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    if (s.is_ok()) s = comm.flush();
    cudaGraphExecDestroy(exec);
    TF_RETURN_IF_ERROR(s);
    std::vector<float> got(static_cast<size_t>(world * n));
    TF_RETURN_IF_ERROR(cuda_ok(cudaMemcpy(got.data(), out.raw(), got.size() * 4, cudaMemcpyDeviceToHost), "download"));
    for (int r = 0; r < world; ++r) {
      const std::vector<float> want = comm_test::rank_data(9, r, static_cast<size_t>(n), 3);
      if (std::memcmp(want.data(), got.data() + r * n, static_cast<size_t>(n) * 4) != 0)
        return internal_error("graph all_gather: rank " + std::to_string(r) + "'s part differs");
    }
  }
  // Inside a capture, calls that wait for the device are refused (the capture then fails).
  {
    Status inside;
    auto g = capture(stream, [&] {
      inside = comm.barrier();
      return Status::ok();
    });
    if (g) cudaGraphExecDestroy(*g);
    if (inside.is_ok()) return internal_error("barrier inside a capture was not refused");
    if (inside.code() == StatusCode::kUnavailable) return inside.with_context("barrier inside a capture broke the world");
  }
  if (me == 0) std::fprintf(stderr, "graph checks: captured all-reduces (f32, bf16; 1, 5, 64 rows) and all-gather "
                                    "equal the rank-order sum bit for bit\n");

  // Timing: 24 all-reduces per graph (a 12-layer decode step's count) vs 24 eager calls.
  constexpr int kPerStep = 24, kReps = 50;
  const char* env = std::getenv("TF_NCCL_ALL_REDUCE");
  const char* path = world == 2 && !(env != nullptr && std::string(env) == "gather") ? "ncclAllReduce"
                                                                                   : "all-gather + rank-order sum";
  cudaEvent_t a = nullptr, b = nullptr;
  TF_RETURN_IF_ERROR(cuda_ok(cudaEventCreate(&a), "event"));
  TF_RETURN_IF_ERROR(cuda_ok(cudaEventCreate(&b), "event"));
  for (int64_t rows : {int64_t{1}, int64_t{4}, int64_t{64}}) {
    TF_ASSIGN_OR_RETURN(Tensor t, device_tensor({rows, hidden}, DType::kF32, device));
    TF_RETURN_IF_ERROR(cuda_ok(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream), "memset"));
    TF_ASSIGN_OR_RETURN(cudaGraphExec_t exec, capture(stream, [&]() -> Status {
                          for (int i = 0; i < kPerStep; ++i) TF_RETURN_IF_ERROR(comm.all_reduce_sum(t));
                          return Status::ok();
                        }));
    double graph_us = 0, eager_us = 0;
    for (int pass = 0; pass < 2; ++pass) {  // pass 0 warms up
      TF_RETURN_IF_ERROR(cuda_ok(cudaEventRecord(a, stream), "record"));
      for (int rep = 0; rep < kReps; ++rep) TF_RETURN_IF_ERROR(cuda_ok(cudaGraphLaunch(exec, stream), "launch"));
      TF_RETURN_IF_ERROR(cuda_ok(cudaEventRecord(b, stream), "record"));
      TF_RETURN_IF_ERROR(comm.flush());
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      graph_us = 1e3 * ms / (kReps * kPerStep);
      TF_RETURN_IF_ERROR(cuda_ok(cudaEventRecord(a, stream), "record"));
      for (int rep = 0; rep < kReps * kPerStep; ++rep) TF_RETURN_IF_ERROR(comm.all_reduce_sum(t));
      TF_RETURN_IF_ERROR(cuda_ok(cudaEventRecord(b, stream), "record"));
      TF_RETURN_IF_ERROR(comm.flush());
      cudaEventElapsedTime(&ms, a, b);
      eager_us = 1e3 * ms / (kReps * kPerStep);
    }
    cudaGraphExecDestroy(exec);
    if (me == 0) {
      std::fprintf(stderr,
                   "tp: all-reduce f32 [%ld x %ld] at world %d (%s): %.1f us per call in a graph (%.3f ms per %d), "
                   "%.1f us eager (deferred)\n",
                   static_cast<long>(rows), static_cast<long>(hidden), world, path, graph_us,
                   graph_us * kPerStep / 1e3, kPerStep, eager_us);
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Status::ok();
}

// --graph --kill: replays a graph of all-reduces, each replay watched by flush(),
// until the communicator fails (a peer was killed).
Status graph_loop(Communicator& comm, cudaStream_t stream, int device, int ready_fd) {
  TF_ASSIGN_OR_RETURN(Tensor t, device_tensor({4, 6144}, DType::kF32, device));
  TF_RETURN_IF_ERROR(cuda_ok(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream), "memset"));
  TF_RETURN_IF_ERROR(comm.all_reduce_sum(t));  // eager first: connections up
  TF_RETURN_IF_ERROR(comm.flush());
  TF_ASSIGN_OR_RETURN(cudaGraphExec_t exec, capture(stream, [&]() -> Status {
                        for (int i = 0; i < 24; ++i) TF_RETURN_IF_ERROR(comm.all_reduce_sum(t));
                        return Status::ok();
                      }));
  Status s;
  for (int i = 0; s.is_ok(); ++i) {
    s = cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    if (s.is_ok()) s = comm.flush();
    if (i == 0 && s.is_ok() && ::write(ready_fd, "r", 1) != 1) s = internal_error("ready pipe");
  }
  // As the model does: the graphs go after the failure (the communicator's abort
  // completes only once no graph holds it). The abort flags stop the spinning kernels.
  std::fprintf(stderr, "rank %d: replay failed (%s); waiting for the stream\n", comm.rank(), s.to_string().c_str());
  const cudaError_t e = cudaStreamSynchronize(stream);
  std::fprintf(stderr, "rank %d: stream done (%s); destroying the graph\n", comm.rank(), cudaGetErrorString(e));
  cudaGraphExecDestroy(exec);
  return s;
}

// One rank (a forked child). Exit codes as comm_worker: 0 ok, 1 failure, 2 kUnavailable.
int run_rank(int rank, int world, int port, int port_fd, int ready_fd, bool loop, bool graph, int64_t hidden) {
  CommOptions o;
  o.backend = CommBackend::kNccl;
  o.rank = rank;
  o.world_size = world;
  o.rendezvous = "127.0.0.1:" + std::to_string(port);
  o.timeout = std::chrono::seconds(120);
  // --graph --kill: a replay's watch (flush) waits out the op timeout; 5 s leaves the
  // check's 10 s room for the teardown.
  if (graph && loop) o.op_timeout = std::chrono::seconds(5);
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
  if (graph) {
    auto* nccl = dynamic_cast<NcclCommunicator*>(comm->get());
    cudaStream_t stream = nullptr;
    if (nccl == nullptr) {
      s = internal_error("not an NcclCommunicator");
    } else if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      s = internal_error("cudaStreamCreate failed");
    } else {
      nccl->set_stream(stream);  // the capturing stream, as the model's ops stream
      s = loop ? graph_loop(**comm, stream, device, ready_fd) : graph_checks(**comm, stream, device, hidden);
    }
  } else if (!loop) {
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
  bool graph = false;
  int64_t hidden = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--world") world = std::atoi(argv[i + 1]);
    if (flag == "--kill") victim = std::atoi(argv[i + 1]);
    if (flag == "--graph") graph = std::atoi(argv[i + 1]) != 0;
    if (flag == "--hidden") hidden = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--kernel") return check_sum_kernel();
  }
  int port_pipe[2], ready_pipe[2];
  if (::pipe(port_pipe) != 0 || ::pipe(ready_pipe) != 0) return 1;
  std::vector<pid_t> pids;
  int port = 0;
  // No CUDA call in the parent: children are forked.
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_rank(rank, world, port, port_pipe[1], ready_pipe[1], victim >= 0, graph, hidden));
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
