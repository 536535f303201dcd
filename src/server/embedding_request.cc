// See embedding_request.h.
#include "server/embedding_request.h"

#include <bit>
#include <cmath>

#include "core/base64.h"
#include "server/api_error.h"

namespace tf::server {
EmbeddingRequest parse_embedding_request(const Json& body) {
  require_object(body, "body");
  EmbeddingRequest r;
  r.model = json_string(body, "model");
  const Json* input = json_field(body, "input");
  if (!input) throw bad_request("'input' is required", "input");
  r.inputs = parse_prompt_inputs(*input, "input");
  if (r.inputs.size() > kMaxEmbeddingInputs)
    throw bad_request("'input' has more than " + std::to_string(kMaxEmbeddingInputs) + " items", "input");
  const std::string format = json_string(body, "encoding_format").value_or("float");
  if (format != "float" && format != "base64")
    throw bad_request("'encoding_format' must be \"float\" or \"base64\", got \"" + format + "\"",
                      "encoding_format");
  r.base64 = format == "base64";
  r.dimensions = json_int(body, "dimensions", 1, int64_t{1} << 20);
  return r;
}

Json embedding_json(int index, const std::vector<float>& hidden, bool base64) {
  double sum = 0.0;
  for (float x : hidden) sum += static_cast<double>(x) * x;
  const double scale = sum > 0.0 ? 1.0 / std::sqrt(sum) : 0.0;
  std::vector<float> unit(hidden.size());
  for (size_t i = 0; i < hidden.size(); ++i) unit[i] = static_cast<float>(hidden[i] * scale);
  Json vec;
  if (base64) {
    static_assert(std::endian::native == std::endian::little, "the wire format is little-endian float32");
    vec = encode_base64(
        std::string_view(reinterpret_cast<const char*>(unit.data()), unit.size() * sizeof(float)));
  } else {
    vec = unit;
  }
  return {{"object", "embedding"}, {"index", index}, {"embedding", std::move(vec)}};
}

}  // namespace tf::server
