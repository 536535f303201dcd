// Post-processors of a Hugging Face tokenizer.json ("post_processor" field): TemplateProcessing
// (e.g. a BOS token before the text), ByteLevel (nothing to do on ids), Bert/Roberta and Sequence.
// They run only on single sequences here: the server never encodes sentence pairs.
#pragma once

#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/bpe.h"

namespace tf::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around `ids` when `add_special_tokens` is true.
  virtual void process(std::vector<TokenId>& ids, bool add_special_tokens) const = 0;
};

Expected<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& config);

}  // namespace tf::text
