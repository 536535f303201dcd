#include "glm5_mtp_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tf::test {
namespace {

struct Verified {
  int64_t length = 0;  // the sequence's length before the step
  std::vector<int32_t> drafts;
  Tensor logits;  // [1 + drafts, vocab], host copy
  int64_t keep = 0;
};

struct Run {
  std::unique_ptr<Glm5Sequence> seq;
  std::vector<int32_t> stream;  // the tokens committed so far
  std::vector<Verified> steps;
};

Tensor host_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  c.copy_from(t);
  return c;
}

// Serial decoding of `stream` (prefilled in the same two chunks): every position's final
// hidden state [n, H] and, from `prefill` on, its logits rows.
Status serial_reference(Glm5Model& model, const std::vector<int32_t>& stream, int64_t prefill, Tensor& hidden,
                        std::vector<Tensor>& logits) {
  const int64_t n = static_cast<int64_t>(stream.size()), h = model.config().hidden_size;
  hidden = Tensor::empty({n, h}, DType::kF32);
  auto seq = model.new_sequence();
  int64_t p = 0;
  for (int64_t end : {prefill / 2, prefill}) {
    StepEntry e{seq.get(), std::span<const int32_t>(stream.data() + p, static_cast<size_t>(end - p)), true};
    e.want_hidden = true;
    auto r = model.step({&e, 1});
    if (!r) return r.status();
    Tensor dst = hidden.slice(0, p, end);
    dst.copy_from((*r)[0].hidden);
    p = end;
  }
  for (; p < n; ++p) {
    StepEntry e{seq.get(), std::span<const int32_t>(stream.data() + p, 1), true};
    e.want_hidden = true;
    auto r = model.step({&e, 1});
    if (!r) return r.status();
    Tensor dst = hidden.slice(0, p, p + 1);
    dst.copy_from((*r)[0].hidden);
    logits.push_back(host_copy((*r)[0].logits));
  }
  return Status::ok();
}

// Whether `token` is the greedy token of `row` (or within tolerance of it).
bool ranks_first(const float* row, int64_t vocab, int32_t token, double tolerance) {
  float best = row[0], scale = 0.0f;
  for (int64_t i = 0; i < vocab; ++i) {
    best = std::max(best, row[i]);
    scale = std::max(scale, std::fabs(row[i]));
  }
  return token >= 0 && token < vocab && row[token] >= best - tolerance * std::max(scale, 1.0f);
}

}  // namespace

std::string describe(const MtpCheck& c) {
  char line[320];
  std::snprintf(line, sizeof line,
                "%lld verify steps, %lld drafts (%lld partial commits): %lld drafts off the reference's greedy token; "
                "%lld of %lld rows differ from serial, max |d| %.3g",
                static_cast<long long>(c.verify_steps), static_cast<long long>(c.drafts),
                static_cast<long long>(c.partial_commits), static_cast<long long>(c.drafts_differing),
                static_cast<long long>(c.rows_differing), static_cast<long long>(c.rows_compared), c.max_abs_diff);
  return line;
}

MtpCheck check_mtp_drafts(Glm5Model& model, const std::vector<int32_t>& ids, int64_t prefill, int64_t steps,
                          const std::vector<int>& ks, const std::vector<int>& keeps, double tolerance) {
  MtpCheck out;
  const int64_t vocab = model.config().vocab_size, m = static_cast<int64_t>(ids.size());
  Run runs[2];
  for (int r = 0; r < 2; ++r) {
    runs[r].seq = model.new_sequence();
    runs[r].stream.assign(ids.begin() + r, ids.begin() + r + prefill);
  }
  // The prompts, both sequences in each of two chunks.
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, prefill / 2}, {prefill / 2, prefill}}) {
    std::vector<StepEntry> batch;
    for (Run& run : runs) {
      StepEntry s{run.seq.get(), std::span<const int32_t>(run.stream.data() + b, static_cast<size_t>(e - b))};
      s.mtp = true;
      batch.push_back(s);
    }
    if (auto r = model.step(batch); !r) {
      out.error = "prefill: " + r.status().to_string();
      return out;
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<StepEntry> batch;
    std::vector<int32_t> next(2);
    for (int r = 0; r < 2; ++r) {
      const int64_t length = static_cast<int64_t>(runs[r].stream.size());
      next[static_cast<size_t>(r)] = ids[static_cast<size_t>(length % m)];
      StepEntry e{runs[r].seq.get(), std::span<const int32_t>(&next[static_cast<size_t>(r)], 1)};
      e.mtp = true;
      e.mtp_drafts = ks[static_cast<size_t>(s + r) % ks.size()];
      batch.push_back(e);
    }
    auto res = model.step(batch);
    if (!res) {
      out.error = "step " + std::to_string(s) + ": " + res.status().to_string();
      return out;
    }
    for (int r = 0; r < 2; ++r) {
      Run& run = runs[r];
      const StepResult& sr = (*res)[static_cast<size_t>(r)];
      Verified v;
      v.length = static_cast<int64_t>(run.stream.size());
      v.drafts = sr.drafts;
      v.logits = host_copy(sr.logits);
      const int64_t rows = 1 + static_cast<int64_t>(v.drafts.size());
      if (v.logits.size(0) != rows) {
        out.error = "step " + std::to_string(s) + ": " + std::to_string(v.logits.size(0)) + " logits rows for " +
                    std::to_string(rows) + " verified";
        return out;
      }
      const int keep = keeps[static_cast<size_t>(s + 2 * r) % keeps.size()];
      v.keep = keep <= 0 ? rows : std::min<int64_t>(keep, rows);
      if (v.keep < rows) ++out.partial_commits;
      // A step without drafts asked is a plain one (nothing to commit).
      if (batch[static_cast<size_t>(r)].mtp_drafts > 0) {
        if (Status st = model.commit_speculation(*run.seq, v.keep); !st.is_ok()) {
          out.error = "commit: " + st.to_string();
          return out;
        }
        ++out.verify_steps;
      }
      run.stream.push_back(next[static_cast<size_t>(r)]);
      run.stream.insert(run.stream.end(), v.drafts.begin(), v.drafts.begin() + (v.keep - 1));
      out.drafts += static_cast<int64_t>(v.drafts.size());
      run.steps.push_back(std::move(v));
    }
  }
  // The references, from the committed streams.
  for (Run& run : runs) {
    Tensor hidden;
    std::vector<Tensor> serial;
    if (Status st = serial_reference(model, run.stream, prefill, hidden, serial); !st.is_ok()) {
      out.error = "serial reference: " + st.to_string();
      return out;
    }
    for (const Verified& v : run.steps) {
      for (int64_t j = 0; j < v.keep; ++j) {
        const float* a = v.logits.data<float>() + j * vocab;
        const float* b = serial[static_cast<size_t>(v.length + j - prefill)].data<float>();
        ++out.rows_compared;
        if (std::memcmp(a, b, static_cast<size_t>(vocab) * sizeof(float)) != 0) ++out.rows_differing;
        for (int64_t t = 0; t < vocab; ++t)
          out.max_abs_diff = std::max(out.max_abs_diff, std::fabs(double(a[t]) - b[t]));
      }
      if (v.drafts.empty()) continue;
      // The pairs (h_i, t_{i+1}) of every position before the step, then the chain.
      auto ref = model.new_sequence();
      auto first = model.mtp_step(*ref, hidden.slice(0, 0, v.length),
                                  std::span<const int32_t>(run.stream.data() + 1, static_cast<size_t>(v.length)));
      if (!first) {
        out.error = "reference mtp_step: " + first.status().to_string();
        return out;
      }
      Tensor logits = first->logits.slice(0, v.length - 1, v.length);
      Tensor fed = first->hidden.slice(0, v.length - 1, v.length);
      for (size_t d = 0; d < v.drafts.size(); ++d) {
        if (!ranks_first(host_copy(logits).data<float>(), vocab, v.drafts[d], tolerance)) ++out.drafts_differing;
        if (d + 1 == v.drafts.size()) break;
        auto next = model.mtp_step(*ref, host_copy(fed), std::span<const int32_t>(&v.drafts[d], 1));
        if (!next) {
          out.error = "reference chained mtp_step: " + next.status().to_string();
          return out;
        }
        logits = next->logits;
        fed = next->hidden;
      }
    }
  }
  return out;
}

}  // namespace tf::test
