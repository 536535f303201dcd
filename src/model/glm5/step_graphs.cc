// StepGraphs (see step_graphs.h): per-(segment, bucket) entries with fixed
// input/output buffers, captured after one eager run, replayed afterwards.
#include "model/glm5/step_graphs.h"

#include "core/logging.h"
#include "core/status.h"

namespace tf {

int64_t StepGraphs::bucket_for(int64_t n) {
  if (n <= 0 || n > kMaxBucket) return 0;
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

// out[j] = res[j] for every output, in one copy_many (in a graph: one kernel node, not a
// chain of copy nodes that would leave the GPU idle between segments).
void StepGraphs::copy_outputs(Ops& ops, std::vector<Tensor>& out, const std::vector<Tensor>& res) {
  std::vector<Tensor*> dsts;
  std::vector<const Tensor*> srcs;
  for (size_t j = 0; j < res.size(); ++j) {
    dsts.push_back(&out[j]);
    srcs.push_back(&res[j]);
  }
  ops.copy_many(dsts, srcs);
}

void StepGraphs::fill_inputs(Entry& e, int64_t n, const std::vector<Input>& inputs) {
  std::vector<Tensor> slices;  // the destinations of the non-stable inputs (rows [0, n))
  slices.reserve(inputs.size());
  std::vector<Tensor*> dsts;
  std::vector<const Tensor*> srcs;
  for (size_t j = 0; j < inputs.size(); ++j) {
    const Tensor& src = inputs[j].t;
    if (inputs[j].stable) {
      // Normally the very buffer the entry was built on (nothing to do).
      if (src.raw() != e.in[j].raw()) {
        dsts.push_back(&e.in[j]);
        srcs.push_back(&src);
      }
      continue;
    }
    if (src.dim() == 0 || src.size(0) != n)
      throw StatusError(invalid_argument("step graphs: input " + std::to_string(j) + " " + src.describe() +
                                         " does not have the step's " + std::to_string(n) + " rows"));
    slices.push_back(e.in[j].slice(0, 0, n));
    dsts.push_back(&slices.back());
    srcs.push_back(&src);
  }
  if (!dsts.empty()) ops_.copy_many(dsts, srcs);
}

StepGraphs::Entry& StepGraphs::create(int key, int64_t bucket, int64_t n, const std::vector<Input>& inputs,
                                      const Body& body) {
  Entry e;
  for (const Input& in : inputs) {
    if (in.stable) {
      if (in.t.dim() == 0 || in.t.size(0) < bucket)
        throw StatusError(invalid_argument("step graphs: stable input " + in.t.describe() + " has fewer than " +
                                           std::to_string(bucket) + " rows"));
      e.in.push_back(in.t);
    } else {
      Shape shape = in.t.shape();
      if (shape.empty()) throw StatusError(invalid_argument("step graphs: a scalar segment input"));
      shape[0] = bucket;
      // Zeros: padded rows must hold finite values (a NaN row could route a MoE
      // token to a bad expert id); later steps leave earlier, finite rows there.
      e.in.push_back(ops_.zeros(shape, in.t.dtype()));
    }
  }
  fill_inputs(e, n, inputs);
  // The eager run: this step's results, and the output shapes.
  const std::vector<Tensor> first = body(e.in);
  for (const Tensor& t : first) e.out.push_back(ops_.empty(t.shape(), t.dtype()));
  copy_outputs(ops_, e.out, first);
  Ops* ops = &ops_;
  auto graph = refuse_ ? Expected<std::unique_ptr<Ops::Graph>>(internal_error("captures refused (test)")) : ops_.capture([ops, in = e.in, out = e.out, body]() mutable {
    const std::vector<Tensor> res = body(in);
    if (res.size() != out.size())
      throw StatusError(internal_error("step graphs: a segment body changed its number of outputs"));
    copy_outputs(*ops, out, res);
  });
  if (graph) {
    e.graph = std::move(*graph);
    ++stats_.captured;
  } else {
    ++stats_.eager_fallbacks;
    TF_LOG_WARN("step graphs: segment {} at {} rows stays eager (capture failed: {})", key, bucket,
                graph.status().to_string());
  }
  return entries_.emplace(std::pair{key, bucket}, std::move(e)).first->second;
}

bool StepGraphs::fell_back(int key, int64_t bucket) const {
  auto it = entries_.find({key, bucket});
  return it != entries_.end() && !it->second.graph;
}

std::vector<Tensor> StepGraphs::run(int key, int64_t bucket, int64_t n, const std::vector<Input>& inputs,
                                    const Body& body) {
  if (!enabled_ || bucket == 0) {
    std::vector<Tensor> plain;
    plain.reserve(inputs.size());
    for (const Input& in : inputs) plain.push_back(in.t);
    return body(plain);
  }
  auto it = entries_.find({key, bucket});
  if (it == entries_.end()) return create(key, bucket, n, inputs, body).out;
  Entry& e = it->second;
  fill_inputs(e, n, inputs);
  if (e.graph) {
    const Status s = ops_.replay(*e.graph);
    if (!s.is_ok()) throw StatusError(s.with_context("step graphs: segment " + std::to_string(key)));
    ++stats_.replays;
  } else {
    const std::vector<Tensor> res = body(e.in);
    if (res.size() != e.out.size())
      throw StatusError(internal_error("step graphs: a segment body changed its number of outputs"));
    copy_outputs(ops_, e.out, res);
  }
  return e.out;
}

}  // namespace tf
