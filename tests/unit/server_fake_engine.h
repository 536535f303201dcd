// A scripted EngineApi for server tests: tokenizes by bytes (token id = byte value,
// vocab 256), renders chat as "role: content\n" lines, and replays a script of events
// per request on its own thread with a small delay between events. Records submitted
// requests and cancellations so tests can observe disconnect -> cancel. A request's grammar
// (structured output, forced tool calls) is compiled and refused as the engine does.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/structured_output.h"
#include "server/engine_api.h"

namespace tf::server::testing {

class FakeEngine : public EngineApi {
 public:
  // What every request replays for each choice: deltas, then a finish.
  std::vector<GenerationEvent> script;
  std::chrono::milliseconds delay{1};
  int burst = 1;  // events sent together before each delay (a verify step's several tokens)
  int64_t context_length = 4096;
  bool queue_full = false;
  bool fail_after_first = false;  // sends a kError after the first delta
  bool endless = false;           // repeats the deltas until cancelled
  // Replayed instead of `script` when the request carries tools (if non-empty).
  std::vector<GenerationEvent> tool_script;

  FakeEngine() { set_text_script("", "Hello world", FinishReason::kStop); }
  ~FakeEngine() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
      for (auto& [id, c] : cancelled_flags_) *c = true;
    }
    for (auto& t : threads) t.join();
  }

  // Reasoning then content, one delta per character group of 3 bytes.
  void set_text_script(const std::string& reasoning, const std::string& content, FinishReason reason) {
    script.clear();
    auto pieces = [&](const std::string& s, bool is_reasoning) {
      for (size_t i = 0; i < s.size(); i += 3) {
        GenerationEvent ev;
        (is_reasoning ? ev.reasoning : ev.content) = s.substr(i, 3);
        script.push_back(ev);
      }
    };
    pieces(reasoning, true);
    pieces(content, false);
    GenerationEvent fin;
    fin.kind = GenerationEvent::Kind::kFinish;
    fin.finish_reason = reason;
    fin.completion_tokens = static_cast<int64_t>(reasoning.size() + content.size());
    fin.reasoning_tokens = static_cast<int64_t>(reasoning.size());
    script.push_back(fin);
  }

  ModelInfo model_info() const override {
    ModelInfo m{"fake-model", "/models/fake", context_length, 256, 1735000000};
    m.parallel = 4;
    m.hidden_size = 8;
    m.device = "cpu";
    m.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
    m.eos_token = "<|endoftext|>";
    return m;
  }

  EngineHealth health() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineHealth h;
    h.busy = active_ > 0;
    h.requests_running = active_;
    h.requests_total = total_;
    h.streams_decoding = active_;
    h.streams_max = 4;
    h.context_length = context_length;
    h.pool_tokens = 10000;
    h.pool_free_tokens = 10000 - 100 * active_;
    h.prompt_tokens_total = 700;
    h.cached_tokens_total = 512;
    h.kept_prompts = 2;
    h.kept_prompt_tokens = 512;
    h.kept_mix = {1, 1, 0, 0};
    h.prompts_resumed_total = 3;
    h.chats_continued_total = 2;
    h.iteration_s = 0.25;
    h.iteration_s_mean = 0.125;
    h.device_memory_in_use_bytes = 3 << 20;
    h.device_memory_held_bytes = 5 << 20;
    h.step_memory_peak_bytes = 1 << 20;
    h.vision_patches_total = 1200;
    h.vision_patches_skipped_total = 300;
    return h;
  }

  Expected<std::vector<int32_t>> tokenize(const std::string& text, bool) const override {
    {
      std::unique_lock<std::mutex> lock(gate_mu_);
      ++at_gate_;
      gate_cv_.notify_all();
      gate_cv_.wait(lock, [&] { return gate_open_; });
      --at_gate_;
    }
    return std::vector<int32_t>(text.begin(), text.end());
  }
  // A gate tokenize() waits at while it is closed: holds requests in their prompt phase (the
  // prompt budget's tests). Open it before the server stops.
  void close_tokenize_gate() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    gate_open_ = false;
  }
  void open_tokenize_gate() {
    {
      std::lock_guard<std::mutex> lock(gate_mu_);
      gate_open_ = true;
    }
    gate_cv_.notify_all();
  }
  // Waits until `n` calls of tokenize() are at the gate.
  bool wait_at_gate(int n, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(gate_mu_);
    return gate_cv_.wait_for(lock, timeout, [&] { return at_gate_ >= n; });
  }
  Expected<std::vector<int32_t>> render_chat(const ChatPrompt& chat) const override {
    std::string s;
    for (const auto& m : chat.messages) {
      s += m["role"].get<std::string>() + ": ";
      if (m.contains("content") && m["content"].is_string()) s += m["content"].get<std::string>();
      s += "\n";
    }
    return std::vector<int32_t>(s.begin(), s.end());
  }
  // Refuses the first image or video part as the engine refuses a bad one: named by its
  // place in the messages it was given ("messages[1].content[0]: ..."). Keeps the
  // messages it was given in `rendered_messages`.
  bool refuse_media = false;
  // Refuses the conversation as a whole, as a chat template's raise_exception does.
  bool refuse_conversation = false;
  Expected<RenderedPrompt> render_chat_media(const ChatPrompt& chat) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      rendered_messages = chat.messages;
    }
    if (refuse_conversation)
      return invalid_argument(
          "chat template: chat_template.jinja:3:7: raise_exception: roles must alternate (fake)");
    for (size_t i = 0; refuse_media && i < chat.messages.size(); ++i) {
      const auto& content = chat.messages[i].value("content", nlohmann::ordered_json());
      for (size_t j = 0; content.is_array() && j < content.size(); ++j) {
        const std::string type = content[j].value("type", "");
        if (type == "image_url" || type == "video_url")
          return invalid_argument("messages[" + std::to_string(i) + "].content[" + std::to_string(j) +
                                  "]: the data is no PNG or JPEG image (fake)");
      }
    }
    return EngineApi::render_chat_media(chat);
  }
  mutable nlohmann::ordered_json rendered_messages;

  Expected<std::string> detokenize(const std::vector<int32_t>& tokens) const override {
    std::string s;
    for (int32_t t : tokens) s.push_back(static_cast<char>(t));
    return s;
  }
  Expected<std::vector<std::string>> token_strings(const std::vector<int32_t>& tokens) const override {
    std::vector<std::string> out;
    for (int32_t t : tokens) out.emplace_back(1, static_cast<char>(t));
    return out;
  }

  Status submit(GenerationRequest request, EventSink sink) override {
    if (queue_full) return resource_exhausted("the request queue is full (fake)");
    // The request's grammar is compiled (and refused) as the engine does.
    if (auto grammar = engine::compile_request_grammar(request); !grammar) return grammar.status();
    auto flag = std::make_shared<std::atomic<bool>>(false);
    std::lock_guard<std::mutex> lock(mu_);
    requests.push_back(request);
    cancelled_flags_[request.request_id] = flag;
    ++active_;
    ++total_;
    std::vector<GenerationEvent> embedding_script;
    if (request.embed) {
      // An embedding request: one event with a "hidden state" made of the prompt's ids
      // (hidden[i] = prompt[i % n]), then the finish.
      GenerationEvent ev;
      for (size_t i = 0; i < 8; ++i)
        ev.embedding.push_back(static_cast<float>(request.prompt_tokens[i % request.prompt_tokens.size()]));
      GenerationEvent fin;
      fin.kind = GenerationEvent::Kind::kFinish;
      fin.finish_reason = FinishReason::kLength;
      embedding_script = {ev, fin};
    }
    const auto& chosen = request.embed                                      ? embedding_script
                         : !request.tools.is_null() && !tool_script.empty() ? tool_script
                                                                            : script;
    threads_.emplace_back([this, request, sink, flag, script = chosen, delay = delay, endless = endless,
                           fail = fail_after_first, burst = std::max(1, burst)] {
      bool done = false;
      int sent = 0;
      while (!done && !*flag) {
        for (int c = 0; c < request.n && !*flag; ++c) {
          for (const GenerationEvent& e : script) {
            if (*flag) break;
            if (endless && e.kind == GenerationEvent::Kind::kFinish) continue;
            GenerationEvent ev = e;
            ev.choice = c;
            sink(ev);
            if (fail) {
              GenerationEvent err;
              err.kind = GenerationEvent::Kind::kError;
              err.error = internal_error("fake engine failure");
              sink(err);
              *flag = true;
              break;
            }
            if (++sent % burst == 0) std::this_thread::sleep_for(delay);
          }
        }
        done = !endless;
      }
      std::lock_guard<std::mutex> l(mu_);
      --active_;
      cv_.notify_all();
    });
    return Status::ok();
  }

  void cancel(const std::string& request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled.insert(request_id);
    auto it = cancelled_flags_.find(request_id);
    if (it != cancelled_flags_.end()) *it->second = true;
    cv_.notify_all();
  }

  bool wait_cancelled(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return !cancelled.empty(); });
  }
  bool wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return active_ == 0; });
  }

  std::vector<GenerationRequest> requests;
  std::set<std::string> cancelled;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  mutable std::mutex gate_mu_;
  mutable std::condition_variable gate_cv_;
  bool gate_open_ = true;
  mutable int at_gate_ = 0;
  std::vector<std::thread> threads_;
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> cancelled_flags_;
  int64_t active_ = 0;
  int64_t total_ = 0;
};

}  // namespace tf::server::testing
