// POST /v1/embeddings (OpenAI's): one vector per input, the model's final hidden state of the
// input's last token (last-token pooling, GenerationRequest::embed), scaled to length 1.
//
// `input` is a string, a list of strings, token ids or lists of token ids (as completions'
// `prompt`); strings are tokenized with the tokenizer's special tokens, as completions do.
// `encoding_format` "float" (default) or "base64" (the little-endian float32 bytes, which
// the openai clients ask for by default and decode themselves). `dimensions` is taken only
// when it is the model's width: GLM-5.3 was not trained to be cut (Matryoshka).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "server/openai_requests.h"

namespace tf::server {

// Inputs per request (OpenAI's limit): each is a prompt of its own in the engine's queue.
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingRequest {
  std::optional<std::string> model;
  std::vector<PromptInput> inputs;
  bool base64 = false;
  std::optional<int64_t> dimensions;
};

EmbeddingRequest parse_embedding_request(const Json& body);

// One input's `data` entry: the vector scaled to length 1 (in double precision), as floats or
// base64. An all-zero vector stays zero.
Json embedding_json(int index, const std::vector<float>& hidden, bool base64);

}  // namespace tf::server
