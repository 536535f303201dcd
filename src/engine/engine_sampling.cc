// Engine::Impl::sampling_params: a request's SamplingOptions (already range-checked
// by the server) over the model's generation_config.json defaults.
// Engine::Impl::sample_step: a step's rows to tokens, on the device where it can
// (Ops::sample_rows: only token ids come back instead of 620 KB of logits per row),
// on the host otherwise; both give the host sampler's token (kernels/api/sample_rows.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/logging.h"
#include "engine/engine_impl.h"

namespace tf::engine {

static_assert(kMaxRepetitionPenalty == static_cast<double>(tf::kMaxRepetitionPenalty),
              "the server's repetition_penalty range (engine_api.h) must be the sampler's");

Expected<SamplingParams> Engine::Impl::sampling_params(const GenerationRequest& r) const {
  const SamplingOptions& o = r.sampling;
  SamplingParams p;
  p.temperature = static_cast<float>(o.temperature.value_or(defaults.temperature));
  p.top_p = static_cast<float>(o.top_p.value_or(defaults.top_p));
  const int top_k = o.top_k.value_or(defaults.top_k);
  p.top_k = top_k < 0 ? 0 : top_k;
  p.min_p = static_cast<float>(o.min_p.value_or(defaults.min_p));
  p.presence_penalty = static_cast<float>(o.presence_penalty);
  p.frequency_penalty = static_cast<float>(o.frequency_penalty);
  p.repetition_penalty =
      static_cast<float>(o.repetition_penalty != 1.0 ? o.repetition_penalty : defaults.repetition_penalty);
  for (const auto& [id, bias] : o.logit_bias) p.logit_bias[id] = static_cast<float>(bias);
  p.seed = o.seed;
  p.n = r.n;
  p.logprobs = o.logprobs || o.top_logprobs > 0;
  p.top_logprobs = o.top_logprobs;
  p.allowed_token_ids = o.allowed_token_ids;
  // A reply that thinks may always end its thinking (thinking_budget and LOOP_GUARD force it).
  if (!p.allowed_token_ids.empty() && r.parse_reasoning && think_end_id)
    p.allowed_token_ids.push_back(*think_end_id);
  std::sort(p.allowed_token_ids.begin(), p.allowed_token_ids.end());
  p.allowed_token_ids.erase(std::unique(p.allowed_token_ids.begin(), p.allowed_token_ids.end()),
                            p.allowed_token_ids.end());
  TF_ASSIGN_OR_RETURN(p.bad_words_ids, bad_words_ids(o.bad_words));
  // Nor may a bad word keep it from ending its thinking: a word whose last token is </think> is
  // not banned in such a reply (the engine could not close a reasoning block that ran too long).
  if (r.parse_reasoning && think_end_id)
    std::erase_if(p.bad_words_ids, [&](const std::vector<int32_t>& w) { return w.back() == *think_end_id; });
  p.stop = o.stop;
  p.stop_token_ids = o.stop_token_ids;
  p.include_stop_str_in_output = o.include_stop_str_in_output;
  p.ignore_eos = o.ignore_eos;
  p.max_tokens = static_cast<int32_t>(
      std::clamp<int64_t>(o.max_tokens, 1, std::numeric_limits<int32_t>::max()));
  p.min_tokens = std::min(o.min_tokens, p.max_tokens);
  if (Status s = p.validate(static_cast<int32_t>(text_vocab)); !s.is_ok()) return s;
  if (Status s = o.repetition_detection.validate(); !s.is_ok())
    return invalid_argument("repetition_detection: " + s.message());
  return p;
}

// vLLM's SamplingParams.update_from_tokenizer: a word is banned as written (with its leading
// spaces dropped) and, where that gives the same number of tokens and another first token,
// with a leading space too (a word inside a text is usually tokenized with its space).
Expected<std::vector<std::vector<int32_t>>> Engine::Impl::bad_words_ids(
    const std::vector<std::string>& words) const {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string bare = word.substr(std::min(word.find_first_not_of(' '), word.size()));
    std::vector<int32_t> plain = tokenizer->encode(bare, false);
    if (plain.empty()) return invalid_argument("'bad_words' must not contain an empty word");
    std::vector<int32_t> spaced = tokenizer->encode(" " + bare, false);
    const bool other_word = spaced.size() == plain.size() && spaced.front() != plain.front();
    out.push_back(std::move(plain));
    if (other_word) out.push_back(std::move(spaced));
  }
  return out;
}

bool Engine::Impl::device_sampling_on() {
  if (device_sampling < 0) {
    const char* env = std::getenv("TF_DEVICE_SAMPLING");
    if (env != nullptr && std::strcmp(env, "0") == 0) {
      device_sampling = 0;
    } else if (env != nullptr && std::strcmp(env, "1") == 0) {
      device_sampling = 1;
    } else {
      device_sampling = std::strcmp(ops->name(), "cpu") != 0 ? 1 : 0;
    }
    TF_LOG_INFO("sampling on the {}", device_sampling ? std::string(ops->name()) + " device where a request allows"
                                                      : std::string("host"));
  }
  return device_sampling == 1;
}

void Engine::Impl::mask_padding(std::span<float> row) const {
  // Padding rows of the embedding are not tokens: never sample them.
  for (size_t t = static_cast<size_t>(text_vocab); t < row.size(); ++t) row[t] = -std::numeric_limits<float>::infinity();
}

bool Engine::Impl::must_close_reasoning(const LiveChoice& c) const {
  if (!think_end_id || !c.output->in_reasoning()) return false;
  const int64_t budget = c.request->req.reasoning_budget;
  return c.reasoning_loop_found || (budget >= 0 && c.output->reasoning_tokens() >= budget);
}

void Engine::Impl::close_reasoning_row(std::span<float> row) const {
  for (size_t t = 0; t < row.size(); ++t)
    if (static_cast<int64_t>(t) != *think_end_id) row[t] = -std::numeric_limits<float>::infinity();
  row[static_cast<size_t>(*think_end_id)] = 0.0f;
}

std::optional<SampleRowParams> Engine::Impl::device_row(const LiveChoice& c) {
  // A structured-output mask is applied on the host (the device sampler takes whole rows).
  if (!device_sampling_on() || !c.sampler || c.constraint_active || must_close_reasoning(c)) return std::nullopt;
  return c.sampler->device_params(static_cast<int32_t>(text_vocab));
}

std::vector<Expected<SequenceStep>> Engine::Impl::sample_step(std::span<LiveChoice* const> rows,
                                                              std::span<const size_t> sampling_rows,
                                                              std::vector<StepResult>& results,
                                                              std::span<const std::optional<SampleRowParams>> device) {
  std::vector<Expected<SequenceStep>> steps(sampling_rows.size(), internal_error("not sampled"));
  std::vector<char> done(sampling_rows.size(), 0);

  // The device rows, in one call (each row the last position of its entry).
  std::vector<size_t> dev_k;
  std::vector<Tensor> dev_rows;
  std::vector<SampleRowParams> dev_params;
  for (size_t k = 0; k < sampling_rows.size(); ++k) {
    const size_t i = sampling_rows[k];
    if (!device[i] || results[i].device_logits.is_null()) continue;
    const Tensor& dl = results[i].device_logits;
    dev_k.push_back(k);
    dev_rows.push_back(dl.select(0, dl.size(0) - 1));
    dev_params.push_back(*device[i]);
  }
  if (!dev_k.empty()) {
    std::vector<SampleRowResult> out(dev_k.size());
    try {
      ops->sample_rows(out, dev_rows, dev_params);
    } catch (const StatusError& e) {
      // The host path below gives the same tokens: degrade, do not fail the requests.
      TF_LOG_WARN("device sampling failed, sampling on the host: {}", e.status().to_string());
      for (auto& r : out) r.status = SampleRowStatus::kUndecided;
    }
    int64_t on_device = 0;
    for (size_t j = 0; j < dev_k.size(); ++j) {
      if (out[j].status != SampleRowStatus::kOk) continue;  // undecided, bad logit, nothing left: host
      const size_t k = dev_k[j];
      steps[k] = rows[sampling_rows[k]]->sampler->accept(out[j]);
      done[k] = 1;
      ++on_device;
    }
    std::lock_guard<std::mutex> lock(health_mu);
    health.sampled_on_device_total += on_device;
  }

  // The host rows; a device row the device left to the host downloads its logits now.
  for (size_t k = 0; k < sampling_rows.size(); ++k) {
    const size_t i = sampling_rows[k];
    if (done[k] || !results[i].logits.is_null()) continue;
    const Tensor& dl = results[i].device_logits;
    if (dl.is_null()) {
      steps[k] = internal_error("sampling: the model step returned no logits for this row");
      done[k] = 1;
      continue;
    }
    results[i].logits = ops->to_host(dl.slice(0, dl.size(0) - 1, dl.size(0)));
  }
  if (samplers.size() < sampling_rows.size()) samplers.resize(sampling_rows.size());
  sample_pool.parallel_for(static_cast<int64_t>(sampling_rows.size()), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      if (done[static_cast<size_t>(k)]) continue;
      const size_t i = sampling_rows[static_cast<size_t>(k)];
      Tensor& logits = results[i].logits;
      const int64_t vocab = logits.shape().back();
      float* row = logits.data<float>();
      mask_padding(std::span<float>(row, static_cast<size_t>(vocab)));
      if (rows[i]->constraint_active) {
        if (Status s = rows[i]->constraint->mask(std::span<float>(row, static_cast<size_t>(text_vocab))); !s.is_ok()) {
          steps[static_cast<size_t>(k)] = s;
          continue;
        }
      }
      if (must_close_reasoning(*rows[i]))
        close_reasoning_row(std::span<float>(row, static_cast<size_t>(vocab)));
      steps[static_cast<size_t>(k)] = rows[i]->sampler->step(std::span<const float>(row, static_cast<size_t>(vocab)),
                                                            samplers[static_cast<size_t>(k)]);
    }
  });
  return steps;
}

}  // namespace tf::engine
