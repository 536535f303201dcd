// POST /tokenize and /detokenize, GET /health and the body of GET /props
// (HttpServer::Impl, http_server_impl.h).
#include <algorithm>
#include <string>
#include <vector>

#include "core/version.h"
#include "server/api_error.h"
#include "server/http_answers.h"
#include "server/http_server_impl.h"
#include "server/openai_requests.h"

namespace tf::server {

using http_detail::parse_body;

void HttpServer::Impl::tokenize(const httplib::Request&, PostBody& in, httplib::Response& res,
                                Clock::time_point) {
  TokenizeRequest r = parse_tokenize_request(parse_body(in), media_policy());
  check_model(r.model);
  Expected<std::vector<int32_t>> ids = std::vector<int32_t>{};
  if (r.is_chat) {
    r.chat.find_system_block = false;  // only the tokens are wanted
    (void)default_effort(r.chat);      // the prompt the chat route would run
    ids = std::move(render_prompt(r.chat, "").tokens);
  } else {
    ids = engine.tokenize(r.prompt, r.add_special_tokens);
  }
  const bool token_strs = r.return_token_strs;
  r = TokenizeRequest();  // the text is not needed any more
  if (!ids) throw api_error_from_status(ids.status());
  // Written straight into the answer's text (same bytes as the Json value's dump): as a Json
  // array, each of a long prompt's millions of ids took 16 bytes more, and its text again.
  std::string out = "{\"count\":" + std::to_string(ids->size()) +
                    ",\"max_model_len\":" + std::to_string(model.context_length) + ",\"tokens\":[";
  out.reserve(out.size() + ids->size() * 8 + 32);
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i) out += ',';
    out += std::to_string((*ids)[i]);
  }
  out += "],\"token_strs\":";
  if (!token_strs) {
    out += "null}";
  } else {
    constexpr size_t kSlice = 4096;  // token strings are made a slice at a time
    out += '[';
    for (size_t first = 0; first < ids->size(); first += kSlice) {
      const size_t last = std::min(ids->size(), first + kSlice);
      auto strs =
          engine.token_strings(std::vector<int32_t>(ids->begin() + static_cast<std::ptrdiff_t>(first),
                                                    ids->begin() + static_cast<std::ptrdiff_t>(last)));
      if (!strs) throw api_error_from_status(strs.status());
      for (size_t i = 0; i < strs->size(); ++i) {
        if (first + i) out += ',';
        out += Json((*strs)[i]).dump(-1, ' ', false, Json::error_handler_t::replace);
      }
    }
    out += "]}";
  }
  set_json_text(res, 200, std::move(out));
}

void HttpServer::Impl::detokenize(const httplib::Request&, PostBody& in, httplib::Response& res,
                                  Clock::time_point) {
  DetokenizeRequest r = parse_detokenize_request(parse_body(in));
  check_model(r.model);
  for (int32_t id : r.tokens)
    if (model.vocab_size > 0 && id >= model.vocab_size)
      throw bad_request(
          "token id " + std::to_string(id) + " is out of range [0, " + std::to_string(model.vocab_size) + ")",
          "tokens");
  auto text = engine.detokenize(r.tokens);
  if (!text) throw api_error_from_status(text.status());
  write_json(res, 200, {{"prompt", *text}});
}

void HttpServer::Impl::health(const httplib::Request&, httplib::Response& res, Clock::time_point) {
  EngineHealth h = engine.health();
  Json out = {
      {"ok", h.ok && !h.loading},
      {"status", h.loading ? "loading" : (h.ok ? "ok" : "error")},
      {"backend", "tensorfold"},
      {"model", model.id},
      {"device", model.device},
      {"busy", h.busy},
      {"requests_running", h.requests_running},
      {"requests_waiting", h.requests_waiting},
      {"requests_total", h.requests_total},
      {"prompt_tokens_total", h.prompt_tokens_total},
      {"completion_tokens_total", h.completion_tokens_total},
      {"cached_tokens_total", h.cached_tokens_total},
      {"streams",
       {{"decoding", h.streams_decoding}, {"prefilling", h.streams_prefilling}, {"max", h.streams_max}}},
      {"context_length", h.context_length},
      {"pool_tokens", h.pool_tokens},
      {"pool_free_tokens", h.pool_free_tokens},
      {"kept_prompts", h.kept_prompts},
      {"kept_prompt_tokens", h.kept_prompt_tokens},
      {"kept_mix",
       {{"prompt_end", h.kept_mix.prompt_end},
        {"system_block", h.kept_mix.system_block},
        {"shared_prefix", h.kept_mix.shared_prefix},
        {"restored", h.kept_mix.restored}}},
      {"prompts_resumed_total", h.prompts_resumed_total},
      {"chats_continued", h.chats_continued_total},
      {"reply_warmups_total", h.reply_warmups_total},
      {"reply_warmup_tokens_total", h.reply_warmup_tokens_total},
      {"iteration_s", h.iteration_s},
      {"iteration_s_mean", h.iteration_s_mean},
      {"prompt_store", h.prompt_store ? Json{{"files", h.prompt_store_files},
                                             {"blocks", h.prompt_store_blocks},
                                             {"bytes", h.prompt_store_bytes},
                                             {"written_total", h.prompt_store_written_total},
                                             {"written_bytes_total", h.prompt_store_written_bytes_total},
                                             {"skipped_total", h.prompt_store_skipped_total},
                                             {"restored_total", h.prompt_store_restored_total},
                                             {"failed_reads_total", h.prompt_store_failed_reads_total},
                                             {"read_ahead_total", h.prompt_store_read_ahead_total}}
                                      : Json(nullptr)},
      {"vision_patches_total", h.vision_patches_total},
      {"vision_patches_skipped_total", h.vision_patches_skipped_total},
      {"prompt_budget",
       {{"bytes", prompt_budget.capacity()},
        {"held_bytes", prompt_budget.held()},
        {"waiting", prompt_budget.waiting()}}},
      {"device_memory",
       {{"in_use_bytes", h.device_memory_in_use_bytes},
        {"held_bytes", h.device_memory_held_bytes},
        {"step_peak_bytes", h.step_memory_peak_bytes}}},
      {"speculation",
       {{"steps_total", h.spec_steps_total},
        {"drafted_tokens_total", h.drafted_tokens_total},
        {"accepted_tokens_total", h.accepted_tokens_total},
        {"mtp_streams_total", h.mtp_streams_total},
        {"mtp_drafted_tokens_total", h.mtp_drafted_tokens_total},
        {"mtp_accepted_tokens_total", h.mtp_accepted_tokens_total}}},
      {"loops",
       {{"reasoning_closed_total", h.loop_guard_closed_total},
        {"repetition_stops_total", h.repetition_stops_total}}}};
  write_json(res, h.ok && !h.loading ? 200 : 503, out);
}

Json HttpServer::Impl::props_json() const {
  const int64_t n_predict = options.default_max_tokens > 0 ? options.default_max_tokens : -1;
  return {{"default_generation_settings",
           {{"n_ctx", model.context_length},
            {"model", model.id},
            {"params", {{"n_predict", n_predict}, {"max_tokens", n_predict}}}}},
          {"total_slots", model.parallel},
          {"model_alias", model.id},
          {"model_path", model.root},
          {"chat_template", model.chat_template},
          {"bos_token", model.bos_token},
          {"eos_token", model.eos_token},
          {"modalities", {{"vision", model.vision}, {"audio", false}}},
          {"build_info", std::string("tensorfold ") + kVersion}};
}

}  // namespace tf::server
