#include "engine/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "model/glm5_weight_spec.h"

namespace tf {
std::string gib_text(int64_t bytes) {
  std::ostringstream o;
  o.precision(2);
  o << std::fixed << static_cast<double>(bytes) / double(int64_t{1} << 30) << " GiB";
  return o.str();
}

Expected<MemoryPlan> plan_memory(const MemoryPlanInput& in) {
  if (in.cache_bytes_per_token <= 0 || in.page_size <= 0 || in.parallel < 1 || in.model_max_context <= 0) {
    return invalid_argument("memory plan: cache bytes per token, page size, PARALLEL and the model's maximum "
                            "context must be positive");
  }
  if (in.context < 0) return invalid_argument("CONTEXT must be >= 0 (0: the largest window that fits)");
  const int64_t states = int64_t{in.parallel} + std::max(0, in.kept_states) + std::max(0, in.speculative_states);
  int64_t budget = in.available_bytes - in.reserve_bytes - in.weight_bytes - states * in.state_bytes_per_stream;
  if (in.pool_cap_bytes > 0) budget = std::min(budget, in.pool_cap_bytes);
  const int64_t page_bytes = in.cache_bytes_per_token * in.page_size;
  if (budget < page_bytes) {
    return resource_exhausted(
        "not enough memory for the cache pool: " + gib_text(in.available_bytes) + " available, " +
        gib_text(in.reserve_bytes) + " kept free (MEMORY_RESERVE_GIB), " + gib_text(in.weight_bytes) +
        " for the weights, " + gib_text(states * in.state_bytes_per_stream) + " for " +
        std::to_string(in.parallel) + " streams' (" + std::to_string(std::max(0, in.speculative_states)) +
        " more for speculative decoding) and " + std::to_string(std::max(0, in.kept_states)) +
        " kept prompts' state; lower MEMORY_RESERVE_GIB, PARALLEL or KEPT_PROMPTS, set COPY=0, or "
        "free memory");
  }
  MemoryPlan plan;
  plan.page_size = in.page_size;
  const int64_t fit_pages = budget / page_bytes;
  const int64_t fit_tokens = fit_pages * in.page_size;
  int64_t context = in.context == 0 ? std::min(fit_tokens, in.model_max_context) : in.context;
  if (context > in.model_max_context) {
    plan.notes.push_back("CONTEXT=" + std::to_string(context) + " is beyond the model's maximum; using " +
                         std::to_string(in.model_max_context));
    context = in.model_max_context;
  }
  if (context > fit_tokens) {
    plan.notes.push_back("CONTEXT=" + std::to_string(context) + " does not fit in the cache pool (" +
                         std::to_string(fit_tokens) + " tokens in " + gib_text(budget) + "); using " +
                         std::to_string(fit_tokens));
    context = fit_tokens;
  }
  // PARALLEL full windows, and with prompt reuse one more: room to keep a prompt as long as
  // the window beside running requests (kept prompts also use what requests leave free).
  const int64_t want_tokens = (in.parallel + (in.kept_states > 0 ? 1 : 0)) * context;
  plan.num_pages = std::min(fit_pages, (want_tokens + in.page_size - 1) / in.page_size);
  plan.pool_tokens = plan.num_pages * in.page_size;
  plan.context = context;
  plan.pool_bytes = plan.num_pages * page_bytes;
  return plan;
}

double matrix_format_bytes_per_weight(MatrixFormat format, double dense_bytes) {
  switch (format) {
    case MatrixFormat::kQ4: return (4.0 + 16.0 / static_cast<double>(kQ4Group)) / 8.0;
    case MatrixFormat::kFp8Block: return 1.0 + 4.0 / static_cast<double>(kFp8BlockSize * kFp8BlockSize);
    case MatrixFormat::kDense: return dense_bytes;
  }
  return dense_bytes;
}

int64_t estimate_weight_bytes(const WeightBytesInput& in) {
  const bool bf16 = in.matrix_dtype == DType::kBF16;
  const int64_t file = in.file_bytes - in.exl3_dense_file_bytes + 2 * in.exl3_dense_elements;
  const int64_t held = bf16 ? (in.fp8_checkpoint ? 2 : 1) * file / 20 * 21  // + f32 norms/routers
                            : file * (in.fp8_checkpoint ? 4 : 2);          // bf16 -> f32, fp8 -> f32
  // FP8 experts kept as stored: 1 byte each instead of the matrix dtype's (as counted above).
  const int64_t kept = in.fp8_checkpoint ? in.fp8_kept_elements : 0;
  const int64_t held_kept = std::max<int64_t>(0, held - kept * (bf16 ? 1 : 3));
  const double matrix = bf16 ? 2.0 : 4.0;
  auto saved = [&](int64_t elements, MatrixFormat format) {
    if (format == MatrixFormat::kDense || elements <= 0) return 0.0;
    return static_cast<double>(elements) * (matrix - matrix_format_bytes_per_weight(format, matrix));
  };
  const double total_saved = saved(in.requantized_elements, in.dense) + saved(in.head_elements, in.head);
  const double draft_head = in.draft_head == MatrixFormat::kDense || in.draft_head == in.head
                                ? 0.0
                                : static_cast<double>(in.head_elements) * matrix_format_bytes_per_weight(in.draft_head, matrix);
  return std::max<int64_t>(0, held_kept - static_cast<int64_t>(std::llround(total_saved - draft_head)));
}

int64_t dense_requantized_elements(const Glm5Config& config) {
  WeightSpecOptions o;
  o.include_vision = false;
  int64_t total = 0;
  for (const WeightSpecEntry& e : glm5_weight_spec(config, o)) {
    // Routed experts stay as they are; the indexer's and the KDA gate bottlenecks are small.
    if (e.name.find(".mlp.experts.") != std::string::npos || e.name.find("indexer") != std::string::npos) continue;
    if (e.name.size() < 7 || e.name.compare(e.name.size() - 7, 7, ".weight") != 0) continue;  // biases
    for (const char* part : {".q_proj.", ".k_proj.", ".v_proj.", ".o_proj.", ".q_a_proj.", ".q_b_proj.",
                             ".kv_a_proj_with_mqa.", ".gate_proj.", ".up_proj.", ".down_proj.", ".eh_proj."}) {
      if (e.name.find(part) != std::string::npos) {
        total += shape_numel(e.shape);
        break;
      }
    }
  }
  return total;
}

int64_t lm_head_elements(const Glm5Config& config) {
  WeightSpecOptions o;
  o.include_vision = false;
  for (const WeightSpecEntry& e : glm5_weight_spec(config, o))
    if (e.name == "lm_head.weight") return shape_numel(e.shape);
  return 0;
}

int64_t routed_expert_elements(const Glm5Config& config) {
  WeightSpecOptions o;
  o.include_vision = false;
  int64_t total = 0;
  for (const WeightSpecEntry& e : glm5_weight_spec(config, o))
    if (e.name.find(".mlp.experts.") != std::string::npos && e.name.size() > 7 &&
        e.name.compare(e.name.size() - 7, 7, ".weight") == 0)
      total += shape_numel(e.shape);
  return total;
}

int64_t host_available_bytes() {
  // TF_MEMINFO: another file in /proc/meminfo's format (tests of the memory guard).
  const char* path = std::getenv("TF_MEMINFO");
  std::ifstream f(path != nullptr && *path != '\0' ? path : "/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (f >> key >> value) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

}  // namespace tf
