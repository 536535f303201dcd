// Engine: the serving engine behind EngineApi — one model, one shared cache
// pool, continuous batching of up to PARALLEL streams.
//
// Threads: HTTP threads call submit()/cancel()/health()/tokenize...; they only
// touch the inbox (under a mutex) and read snapshots. One engine thread owns
// the scheduler, the model and every request's state, and runs steps:
//   take new requests and cancels -> Scheduler::schedule() -> one batched
//   model step over every advance (prefill chunks + decode tokens) -> sample
//   the rows that yield a token -> text pipeline (ChoiceOutput) -> events.
// A choice (n > 1 gives several) is one scheduler request with its own
// sequence state and seed; a request ends when all its choices have.
#pragma once

#include <memory>
#include <span>

#include "core/status.h"
#include "engine/engine_api.h"
#include "engine/engine_options.h"

namespace tf::engine {

class Engine final : public EngineApi {
 public:
  // Loads the checkpoint, sizes the cache pool and starts the engine thread.
  static Expected<std::unique_ptr<Engine>> create(const EngineOptions& options);
  ~Engine() override;  // stops the engine thread; requests in flight end with an error

  ModelInfo model_info() const override;
  EngineHealth health() const override;
  Expected<std::vector<int32_t>> tokenize(const std::string& text, bool add_special_tokens) const override;
  Expected<std::vector<int32_t>> render_chat(const ChatPrompt& chat) const override;
  Expected<RenderedPrompt> render_chat_media(const ChatPrompt& chat) const override;  // engine_media.cc
  Expected<std::string> detokenize(const std::vector<int32_t>& tokens) const override;
  Expected<std::vector<std::string>> token_strings(const std::vector<int32_t>& tokens) const override;
  Status submit(GenerationRequest request, EventSink sink) override;
  void cancel(const std::string& request_id) override;
  // How long the model step in flight has run, in seconds (0 between steps): the stall
  // watchdog's reading (WATCHDOG_S). Safe from any thread.
  double step_seconds() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  // Prompt reuse (engine_prompt_reuse.cc): how many leading tokens of `full` (the chat's
  // rendered prompt) its system block alone renders to (0: none).
  int64_t system_block_tokens(const ChatPrompt& chat, std::span<const int32_t> full) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::engine
