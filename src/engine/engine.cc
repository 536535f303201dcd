// Engine: loading and the thread-safe API calls. The engine thread's step loop
// is in engine_loop.cc.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "core/logging.h"
#include "engine/checkpoint_pages.h"
#include "engine/engine_impl.h"
#include "engine/load_progress.h"
#include "engine/structured_output.h"
#include "engine/tool_call_grammar.h"
#include "engine/tp_follower.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/dense_quant.h"
#include "model/exl3_weights.h"
#if TF_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif
#include "text/tokenizer_config.h"

namespace tf::engine {
namespace fs = std::filesystem;
namespace {

Expected<nlohmann::json> read_optional_json(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return nlohmann::json::object();
  auto j = text::read_json_file(path);
  if (!j) return j.status();
  if (!j->is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

Expected<ChatTemplate> load_chat_template(const fs::path& dir, const text::Tokenizer& tok,
                                          const nlohmann::json& tokenizer_config) {
  if (!tok.config().chat_template) {
    return invalid_argument(dir.string() + ": no chat template (neither chat_template.jinja nor a chat_template "
                            "field in tokenizer_config.json)");
  }
  return ChatTemplate::create(*tok.config().chat_template, tokenizer_config, (dir / "chat_template.jinja").string());
}

Expected<SamplingDefaults> sampling_defaults(const nlohmann::json& g, const fs::path& path) {
  SamplingDefaults d;
  auto number = [&](const char* key, double& out) -> Status {
    if (!g.contains(key) || g[key].is_null()) return Status::ok();
    if (!g[key].is_number()) return invalid_argument(path.string() + ": " + key + " must be a number");
    out = g[key].get<double>();
    return Status::ok();
  };
  double top_k = 0;
  for (auto [key, out] : {std::pair{"temperature", &d.temperature}, std::pair{"top_p", &d.top_p},
                          std::pair{"min_p", &d.min_p}, std::pair{"repetition_penalty", &d.repetition_penalty},
                          std::pair{"top_k", &top_k}}) {
    Status s = number(key, *out);
    if (!s.is_ok()) return s;
  }
  d.top_k = static_cast<int>(top_k);
  return d;
}

// Bytes the backend will hold for the weights (memory_plan.h: the matrix dtype, and
// the matrices DENSE re-quantizes at their format's bytes).
int64_t estimate_weight_bytes(const fs::path& dir, const Glm5Config& config, DType matrix_dtype,
                              MatrixFormat dense = MatrixFormat::kDense, MatrixFormat head = MatrixFormat::kDense,
                              const Exl3DenseLinears& exl3_dense = {},
                              MatrixFormat draft_head = MatrixFormat::kDense) {
  WeightBytesInput in;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") in.file_bytes += static_cast<int64_t>(e.file_size(ec));
  }
  in.fp8_checkpoint = config.quantization.method == "fp8";
  in.matrix_dtype = matrix_dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
  in.dense = dense;
  if (dense != MatrixFormat::kDense) in.requantized_elements = dense_requantized_elements(config);
  in.head = head;
  if (head != MatrixFormat::kDense || draft_head != MatrixFormat::kDense) in.head_elements = lm_head_elements(config);
  in.draft_head = draft_head;
  if (in.fp8_checkpoint) in.fp8_kept_elements = routed_expert_elements(config);
  in.exl3_dense_elements = exl3_dense.elements;
  in.exl3_dense_file_bytes = exl3_dense.file_bytes;
  return tf::estimate_weight_bytes(in);
}

DType latent_dtype(const std::string& kv) {
  if (kv == "f32") return DType::kF32;
  if (kv == "bf16") return DType::kBF16;
  return DType::kF8E4M3;
}

MemoryPlanInput memory_input(const EngineOptions& o, const Glm5Config& config, int64_t available_bytes,
                             int64_t weight_bytes) {
  const Glm5TextConfig& t = config.text;
  const int mla = t.count_layers(AttentionKind::kSparseMla);
  const int kda = t.count_layers(AttentionKind::kLinear);
  const DType dt = latent_dtype(o.kv);
  const int64_t latent = t.kv_lora_rank * static_cast<int64_t>(dtype_size(dt)) + (dt == DType::kF8E4M3 ? 4 : 0);
  const int64_t latent_layers = mla + (t.num_nextn_predict_layers > 0 ? 1 : 0);
  const int64_t indexer = mla * int64_t{t.index_head_dim} * 4 / std::max(1, t.index_kpool) + 1;
  const int64_t dk = t.linear_head_dim, heads = t.linear_num_heads, kw = t.linear_conv_kernel_dim;
  MemoryPlanInput in;
  in.available_bytes = available_bytes;
  in.reserve_bytes = static_cast<int64_t>(o.memory_reserve_gib * 1073741824.0);
  in.weight_bytes = weight_bytes;
  in.pool_cap_bytes = static_cast<int64_t>(o.kv_pool_gib * 1073741824.0);
  in.cache_bytes_per_token = latent_layers * latent + indexer;
  in.state_bytes_per_stream = kda * (heads * dk * dk + 3 * (kw - 1) * heads * dk) * 4;
  in.parallel = o.parallel;
  in.kept_states = o.kept_prompts;
  in.speculative_states = o.copy_drafts || o.mtp_on() ? o.parallel : 0;
  in.context = o.context;
  in.model_max_context = t.max_position_embeddings;
  in.page_size = o.page_size;
  return in;
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Expected<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
  if (Status s = options.validate(); !s.is_ok()) return s;
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.options = options;
  const fs::path dir(options.model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(options.model_dir + ": not a model folder");

  auto config = load_glm5_config(dir.string());
  if (!config) return config.status();
  m.config = std::move(*config);
  auto tok = text::Tokenizer::from_directory(dir);
  if (!tok) return tok.status().with_context(dir.string());
  m.tokenizer = std::move(*tok);
  auto tok_config = read_optional_json(dir / "tokenizer_config.json");
  if (!tok_config) return tok_config.status();
  auto tmpl = load_chat_template(dir, *m.tokenizer, *tok_config);
  if (!tmpl) return tmpl.status();
  m.chat_template.emplace(std::move(*tmpl));
  auto gen = read_optional_json(dir / "generation_config.json");
  if (!gen) return gen.status();
  auto defaults = sampling_defaults(*gen, dir / "generation_config.json");
  if (!defaults) return defaults.status();
  m.defaults = *defaults;
  for (int32_t id : m.tokenizer->eos_token_ids()) m.eos_ids.push_back(id);
  if (m.eos_ids.empty()) {
    for (int64_t id : m.config.text.eos_token_ids) m.eos_ids.push_back(static_cast<int32_t>(id));
  }
  m.think_start_id = m.tokenizer->token_to_id(ChatTemplate::kThinkStart);
  m.think_end_id = m.tokenizer->token_to_id(ChatTemplate::kThinkEnd);
  m.text_vocab = static_cast<int64_t>(m.tokenizer->vocab_size());
  if (m.text_vocab > m.config.text.vocab_size) {
    return invalid_argument(dir.string() + ": the tokenizer has " + std::to_string(m.text_vocab) +
                            " ids but the model only " + std::to_string(m.config.text.vocab_size) + " rows");
  }

  if (options.device == "cuda") {
#if TF_HAVE_CUDA
    auto cuda_ops = make_cuda_ops(options.cuda_device, options.exact_rows);
    if (!cuda_ops) {
      return cuda_ops.status().with_context("--device cuda (GPU " + std::to_string(options.cuda_device) + ")");
    }
    m.ops = std::move(*cuda_ops);
#else
    return unimplemented("--device cuda: this tensorfold was built without CUDA (configure with -DTF_CUDA=ON)");
#endif
  } else {
    m.ops = make_cpu_ops();
  }
  decide_checkpoint_pages(options.device, options.cuda_device);
  if (options.tp_comm && options.tp_comm->world_size() > 1) {
    if (options.tp_comm->rank() != 0) {
      return invalid_argument("the engine runs on rank 0 of a tensor-parallel world, not rank " +
                              std::to_string(options.tp_comm->rank()) + " (followers use serve_follower)");
    }
    // Step commands on the host channel; the model's collectives on model_comm
    // (NCCL on the ops' stream with --device cuda), or the host channel on CPU ranks.
    auto model_comm = bind_model_comm(*options.tp_comm, options.model_comm.get(), options.device, *m.ops);
    if (!model_comm) return model_comm.status();
    m.comm = options.model_comm ? options.model_comm : options.tp_comm;
    m.tp = std::make_unique<StepBroadcaster>(*options.tp_comm);
  } else {
    m.comm = make_single_rank_communicator();
  }
  auto weights = open_weight_source(dir.string(), m.config);
  if (!weights) return weights.status();
  // DENSE: "" is q4 (issue #8's default): the large dense matrices re-quantized at load.
  const std::string dense = options.dense.empty() ? std::string(kDefaultDense) : options.dense;
  const DType matrix_dtype = options.device == "cuda" && dense != "f32" ? DType::kBF16 : DType::kF32;
  const MatrixFormat dense_quant = dense_quant_format(dense).value_or(MatrixFormat::kDense);
  // LM_HEAD: "" / "dense" keeps lm_head unquantized; q4 / fp8 as DENSE's formats.
  const MatrixFormat head_quant = dense_quant_format(options.lm_head).value_or(MatrixFormat::kDense);
  // An exllamav3 conversion's EXL3 linears outside the routed experts: dequantized at load.
  Exl3DenseLinears exl3_dense;
  if (m.config.quantization.method == "exl3") {
    if (auto ckpt = Checkpoint::open(dir.string()); ckpt.has_value()) exl3_dense = exl3_dense_linears(**ckpt);
    if (exl3_dense.linears > 0)
      TF_LOG_INFO("{} EXL3 linears outside the routed experts ({:.3g} GB stored) are dequantized at load, "
                  "then DENSE={} / LM_HEAD={}",
                  exl3_dense.linears, exl3_dense.file_bytes / 1e9, dense,
                  options.lm_head.empty() ? "dense" : options.lm_head);
  }
  // The MTP drafts read a q4 copy of a dense lm_head (MtpWeights::draft_head: ~0.34 GB held
  // for a draft pass ~4x cheaper on its largest matrix).
  const MatrixFormat draft_head_quant = options.mtp_on() && m.config.text.num_nextn_predict_layers > 0 &&
                                                head_quant == MatrixFormat::kDense
                                            ? MatrixFormat::kQ4
                                            : MatrixFormat::kDense;
  const int64_t weight_bytes =
      estimate_weight_bytes(dir, m.config, matrix_dtype, dense_quant, head_quant, exl3_dense, draft_head_quant);
  // Weights, cache pool and stream states live where the model computes.
  int64_t available = host_available_bytes();
#if TF_HAVE_CUDA
  if (options.device == "cuda") {
    auto free = cuda_free_bytes(options.cuda_device);
    if (!free) return free.status().with_context("--device cuda: reading the GPU's free memory");
    // A GPU sharing the host's memory (a DGX Spark) reports what is unused right now, not the
    // page cache (e.g. the checkpoint just copied to it) that the kernel gives back on demand.
    available = cuda_shares_host_memory(options.cuda_device) ? std::max(*free, available) : *free;
  }
#endif
  MemoryPlanInput mem = memory_input(options, m.config, available, weight_bytes);
  if (m.tp && options.device == "cuda") {
    // A GPU per rank: this one holds its shard of the weights (the embedding is
    // replicated: counted whole, as f32 to be safe) and a whole cache pool.
    const int64_t world = m.comm->world_size();
    const int64_t embed = m.config.text.vocab_size * m.config.text.hidden_size * 4;
    mem.weight_bytes = std::min(weight_bytes, weight_bytes / world + embed);
  } else if (m.tp) {
    // The CPU ranks share this host: the weights are split among them, but each
    // holds its own cache pool and stream states, so each plans with its share.
    const int64_t world = m.comm->world_size();
    const int64_t spare = std::max<int64_t>(0, mem.available_bytes - mem.reserve_bytes - mem.weight_bytes);
    mem.available_bytes = spare / world + mem.reserve_bytes + mem.weight_bytes;
  }
  auto plan = plan_memory(mem);
  if (!plan) return plan.status();
  m.plan = *plan;
  if (m.tp) {
    // The followers size their pools from ours (tp_follower.h), whatever memory they saw.
    Status sent = send_model_setup(*options.tp_comm,
                                   {m.plan.page_size, m.plan.num_pages, latent_dtype(options.kv), matrix_dtype,
                                    static_cast<uint8_t>(dense_quant), static_cast<uint8_t>(head_quant),
                                    static_cast<uint8_t>(draft_head_quant)});
    if (!sent.is_ok()) return sent.with_context("sending the model setup to the follower ranks");
  }
  for (const std::string& note : m.plan.notes) TF_LOG_WARN("{}", note);
  TF_LOG_INFO("cache pool: {} tokens ({:.2f} GiB, KV={}), window {} tokens, PARALLEL={}", m.plan.pool_tokens,
              m.plan.pool_bytes / 1073741824.0, options.kv, m.plan.context, options.parallel);

  const auto t0 = std::chrono::steady_clock::now();
  // Progress counts the f32 bytes the source hands out, whatever the matrices become.
  ProgressWeightSource progress(**weights, estimate_weight_bytes(dir, m.config, DType::kF32, MatrixFormat::kDense,
                                                                 MatrixFormat::kDense, exl3_dense));
  Glm5Options mo;
  mo.latent_dtype = latent_dtype(options.kv);
  mo.weight_dtype = matrix_dtype;
  mo.dense_quant = dense_quant;
  mo.head_quant = head_quant;
  mo.draft_head_quant = draft_head_quant;
  mo.page_size = m.plan.page_size;
  mo.num_pages = m.plan.num_pages;
  auto model = Glm5Model::load(m.config, progress, *m.ops, *m.comm, mo);
  if (!model) return model.status();
  m.model = std::move(*model);
  m.mtp_drafting = options.mtp_on() && m.model->has_mtp();
  if (options.draft_model == "dflash2")
    TF_LOG_WARN("DRAFTER=dflash2: this server has no DFlash2 drafter; {}", m.mtp_drafting
                    ? "the checkpoint's MTP layer drafts instead"
                    : "the checkpoint has no MTP layer either, so only copy drafts are made");
  if (m.config.vision.present && !options.vision) {
    m.no_vision_reason = "the server runs without its vision tower (VISION=0)";
    TF_LOG_INFO("VISION=0: the vision tower is not loaded; images and videos are refused");
  } else if (m.config.vision.present) {
    // The vision tower: on rank 0 only (the followers get the features with the step).
    auto vision = Glm5VisionTower::load(m.config, progress, *m.ops, matrix_dtype);
    if (vision && (*vision)->out_hidden() != m.config.text.hidden_size) {
      // transformers' default vision config has this inconsistency (out_hidden_size 1536 for a
      // 4096-wide text model): its features cannot fill the placeholders.
      TF_LOG_WARN("the vision tower's features are {} wide but the text model is {}: images and videos are refused",
                  (*vision)->out_hidden(), m.config.text.hidden_size);
      m.no_vision_reason = "the checkpoint's vision tower does not fit its text model";
    } else if (vision) {
      m.vision = std::move(*vision);
    } else if (vision.status().code() == StatusCode::kNotFound) {
      // A config with a vision_config but no vision weights (the demo and synthetic
      // checkpoints): serve text; media parts get a 400.
      TF_LOG_WARN("the checkpoint has no vision tower weights ({}): images and videos are refused",
                  vision.status().message());
    } else {
      return vision.status().with_context("vision tower");
    }
    const Glm5Config& c = m.config;
    m.media_ids = {static_cast<int32_t>(c.image_token_id),       static_cast<int32_t>(c.video_token_id),
                   static_cast<int32_t>(c.image_start_token_id), static_cast<int32_t>(c.image_end_token_id),
                   static_cast<int32_t>(c.video_start_token_id), static_cast<int32_t>(c.video_end_token_id)};
  }
  // VISION_URLS: media parts may also be https:// URLs, fetched while the request is rendered.
  m.media_limits.fetch_urls = options.vision_urls == "1" || options.vision_urls == "lan";
  m.media_limits.fetch.allow_private = options.vision_urls == "lan";
  m.media_limits.fetch.ca_file = options.vision_urls_ca;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t file_bytes = 0;  // the checkpoint's safetensors files: what the load rate is of
  {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") file_bytes += static_cast<int64_t>(e.file_size(ec));
  }
  TF_LOG_INFO("loaded {} tensors ({:.2f} GiB) in {:.1f} s: {:.2f} GB/s ({:.2f} GB of checkpoint files)",
              progress.tensors(), progress.loaded_bytes() / 1073741824.0, secs,
              file_bytes / 1e9 / std::max(secs, 1e-9), file_bytes / 1e9);

  m.budget = std::make_unique<PagedCacheBudget>(m.plan.num_pages, m.plan.page_size);
  SchedulerConfig sc;
  sc.max_running = options.parallel;
  const int32_t chunk = options.prefill_chunk_or_default();
  sc.max_prefill_chunk = chunk;
  sc.align_prefill_chunks = true;
  sc.step_token_budget = options.step_token_budget > 0 ? options.step_token_budget : chunk * 2 + options.parallel;
  sc.max_waiting = options.max_waiting;
  // The CPU ops are row-independent at any size; on the GPU only up to exact_rows rows.
  if (options.device == "cuda" && options.batch_invariant && options.exact_rows > 0)
    sc.batch_invariant_rows = options.exact_rows;
  else if (options.device == "cuda" && options.batch_invariant)
    TF_LOG_WARN(
        "EXACT_ROWS=0: every GPU step uses BF16 tensor cores, so replies depend on their batch-mates");
  if (Status s = sc.validate(); !s.is_ok()) return s;
  m.scheduler = std::make_unique<Scheduler>(sc, *m.budget);
  if (Status s = m.setup_prompt_reuse(); !s.is_ok()) return s;
  m.samplers.resize(static_cast<size_t>(m.sample_pool.size()));

  m.info.id = options.served_name.empty() ? fs::absolute(dir).filename().string() : options.served_name;
  m.info.root = options.model_dir;
  m.info.context_length = m.plan.context;
  m.info.vocab_size = m.text_vocab;
  m.info.max_queued_choices = options.max_waiting;
  m.info.parallel = options.parallel;
  m.info.reuse_grain = m.reuse_grain;
  m.info.device = options.device;
  m.info.hidden_size = m.config.text.hidden_size;
  m.info.vision = m.vision != nullptr;
  m.info.chat_template = m.tokenizer->config().chat_template.value_or("");
  m.info.bos_token = m.chat_template->bos_token().value_or("");
  m.info.eos_token = m.chat_template->eos_token().value_or("");
  m.info.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  if (const MemoryUse use = m.ops->memory_use(); use.held_bytes > 0)
    TF_LOG_INFO(
        "device memory after loading: {} alive (weights, cache pool, states), {} taken from the driver; a "
        "step's working memory comes out of MEMORY_RESERVE_GIB ({:.2f} GiB)",
        gib_text(use.in_use_bytes), gib_text(use.held_bytes), options.memory_reserve_gib);
  // TF_MEMORY_PROBE=0 skips the probe (a bench measuring the steps' own working memory).
  const char* probe_env = std::getenv("TF_MEMORY_PROBE");
  if (options.probe_working_memory && !(probe_env != nullptr && std::string(probe_env) == "0"))
    TF_RETURN_IF_ERROR(m.probe_working_memory());
  m.publish_health();
  m.ops->reset_memory_peak();                            // the loading's peak is no step's
  m.note_step_memory(m.ops->memory_use().in_use_bytes);  // the device memory now, for /health

  std::unique_ptr<Engine> engine(new Engine(std::move(impl)));
  Impl* raw = engine->impl_.get();
  raw->thread = std::thread([raw] { raw->run(); });
  return engine;
}

ModelInfo Engine::model_info() const { return impl_->info; }

EngineHealth Engine::health() const {
  EngineHealth health;
  {
    std::lock_guard<std::mutex> lock(impl_->health_mu);
    health = impl_->health;
  }
  // The store's figures live: its writer finishes after the engine's last step.
  if (const PromptStore* store = impl_->store.get()) {
    const PromptStoreStats ss = store->stats();
    health.prompt_store = true;
    health.prompt_store_files = ss.files;
    health.prompt_store_blocks = ss.blocks;
    health.prompt_store_bytes = ss.bytes;
    health.prompt_store_written_total = ss.written_total;
    health.prompt_store_written_bytes_total = ss.written_bytes_total;
    health.prompt_store_skipped_total = ss.skipped_total;
    health.prompt_store_restored_total = ss.restored_total;
    health.prompt_store_failed_reads_total = ss.failed_reads_total;
    health.prompt_store_read_ahead_total = ss.read_ahead_total;
  }
  return health;
}

Expected<std::vector<int32_t>> Engine::tokenize(const std::string& text, bool add_special_tokens) const {
  return impl_->tokenizer->encode(text, add_special_tokens);
}

Expected<std::vector<int32_t>> Engine::render_chat(const ChatPrompt& chat) const {
  ChatTemplateRequest tr;
  tr.messages = chat.messages;
  if (!chat.tools.is_null()) tr.tools = chat.tools;
  tr.add_generation_prompt = chat.add_generation_prompt && !chat.continue_final_message;
  tr.kwargs = chat.chat_template_kwargs;
  if (!chat.reasoning_effort.empty()) tr.kwargs["reasoning_effort"] = chat.reasoning_effort;
  auto prompt = impl_->chat_template->render(std::move(tr));  // its copy of the messages goes to the template
  if (!prompt) return invalid_argument("chat template: " + prompt.status().message());
  return impl_->tokenizer->encode(prompt->text, /*add_special_tokens=*/false);
}

Expected<std::string> Engine::detokenize(const std::vector<int32_t>& tokens) const {
  for (int32_t t : tokens) {
    if (t < 0 || t >= impl_->text_vocab) {
      return invalid_argument("token id " + std::to_string(t) + " is out of range [0, " +
                              std::to_string(impl_->text_vocab) + ")");
    }
  }
  return impl_->tokenizer->decode(tokens, /*skip_special_tokens=*/false);
}

Expected<std::vector<std::string>> Engine::token_strings(const std::vector<int32_t>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) {
    auto s = impl_->tokenizer->id_to_token(t);
    if (!s) return invalid_argument("token id " + std::to_string(t) + " is out of range");
    out.push_back(std::move(*s));
  }
  return out;
}

double Engine::step_seconds() const {
  const int64_t t0 = impl_->step_started_ns.load();
  if (t0 == 0) return 0.0;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  return static_cast<double>(now - t0) * 1e-9;
}

Status Engine::submit(GenerationRequest request, EventSink sink) {
  Impl& m = *impl_;
  if (request.n < 1) return invalid_argument("n must be >= 1");
  // More choices than may wait at once would be refused as busy (429) forever, however idle.
  if (request.n > m.options.max_waiting)
    return invalid_argument("n (" + std::to_string(request.n) + ") is more than the " +
                            std::to_string(m.options.max_waiting) + " choices this server queues at once (MAX_QUEUED)");
  if (request.prompt_tokens.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : request.prompt_tokens) {
    if (t < 0 || t >= m.text_vocab) {
      return invalid_argument("prompt token id " + std::to_string(t) + " is out of range [0, " +
                              std::to_string(m.text_vocab) + ")");
    }
  }
  const int64_t need = static_cast<int64_t>(request.prompt_tokens.size()) + request.sampling.max_tokens;
  if (need > m.plan.context) {
    return invalid_argument("prompt (" + std::to_string(request.prompt_tokens.size()) + " tokens) + max_tokens (" +
                            std::to_string(request.sampling.max_tokens) + ") exceed the window of " +
                            std::to_string(m.plan.context) + " tokens");
  }
  if (request.media) {
    if (!m.vision) return invalid_argument(m.no_vision_reason + ": image and video parts are not supported");
    for (int64_t p : request.media->positions)
      if (p < 0 || p >= static_cast<int64_t>(request.prompt_tokens.size()))
        return invalid_argument("an image placeholder position lies outside the prompt");
  }
  if (!request.label_tokens.empty()) {
    if (request.sampling.max_tokens != 0)
      return invalid_argument("label scoring generates nothing: max_tokens must be 0");
    if (request.prompt_logprobs >= 0)
      return invalid_argument("label scoring does not score the prompt's tokens too");
    if (request.label_tokens.size() > static_cast<size_t>(kMaxLabelTokens))
      return invalid_argument("at most " + std::to_string(kMaxLabelTokens) + " label tokens are scored");
    for (int32_t t : request.label_tokens)
      if (t < 0 || t >= m.text_vocab)
        return invalid_argument("label token id " + std::to_string(t) + " is out of range [0, " +
                                std::to_string(m.text_vocab) + ")");
  }
  if (request.embed) {
    if (request.sampling.max_tokens != 0)
      return invalid_argument("an embedding generates nothing: max_tokens must be 0");
    if (request.prompt_logprobs >= 0 || !request.label_tokens.empty() || request.n != 1)
      return invalid_argument("an embedding request neither scores tokens nor has several choices");
  }
  if (request.warm_from >= 0 && (request.sampling.max_tokens != 0 || request.n != 1 || request.embed ||
                                 request.prompt_logprobs >= 0 || !request.label_tokens.empty()))
    return invalid_argument(
        "a reply's warm-up only runs its prompt: max_tokens 0, one choice, nothing scored");
  if (request.prompt_logprobs > kMaxTopLogprobs)
    return invalid_argument("prompt_logprobs must be at most " + std::to_string(kMaxTopLogprobs));
  auto params = m.sampling_params(request);
  if (!params) return params.status();
  // Compiled before the request counts as waiting: a refusal leaves nothing behind.
  std::shared_ptr<const grammar::Grammar> structured;
  std::shared_ptr<const grammar::TokenVocabulary> vocab;
  auto compiled = compile_request_grammar(request);
  if (!compiled) return compiled.status();
  structured = std::move(*compiled);
  if (structured && request.forces_tool_call()) {
    std::lock_guard<std::mutex> lock(m.grammar_vocab_mu);
    if (!m.tool_grammar_vocab) m.tool_grammar_vocab = grammar_vocabulary(*m.tokenizer, m.text_vocab, kToolCallMarkers);
    vocab = m.tool_grammar_vocab;
  } else if (structured) {
    std::lock_guard<std::mutex> lock(m.grammar_vocab_mu);
    if (!m.grammar_vocab) m.grammar_vocab = grammar_vocabulary(*m.tokenizer, m.text_vocab);
    vocab = m.grammar_vocab;
  }
  const int64_t queued = m.queued_choices.fetch_add(request.n) + request.n;
  if (queued > m.options.max_waiting) {
    m.queued_choices.fetch_sub(request.n);
    return resource_exhausted("the server is busy: " + std::to_string(m.options.max_waiting) +
                              " requests are already waiting; retry later");
  }
  auto live = std::make_shared<LiveRequest>();
  live->structured_grammar = std::move(structured);
  live->grammar_vocab = std::move(vocab);
  if (live->structured_grammar)
    live->grammar_masks =
        std::make_shared<grammar::SharedMasks>(std::max<size_t>(16, 2 * static_cast<size_t>(request.n)));
  live->req = std::move(request);
  live->sink = std::move(sink);
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.stopping) {
      m.queued_choices.fetch_sub(live->req.n);
      return unavailable("the server is stopping");
    }
    m.inbox.push_back(std::move(live));
  }
  m.wake.notify_all();
  return Status::ok();
}

void Engine::cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->cancels.push_back(request_id);
  }
  impl_->wake.notify_all();
}

}  // namespace tf::engine
