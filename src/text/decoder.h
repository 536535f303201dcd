// Decoders of a Hugging Face tokenizer.json ("decoder" field): ByteLevel, Replace, ByteFallback,
// Fuse, Strip, Metaspace, WordPiece, CTC, BPEDecoder and Sequence. A decoder turns the token strings of a sequence of ids into
// text; each stage maps a list of pieces to a list of pieces, and the final text is their
// concatenation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace tf::text {

struct DecodePiece {
  std::string text;
  bool added = false;  // an added token: ByteLevel passes its content through unchanged
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<DecodePiece>& pieces) const = 0;
  // True when the decoder is ByteLevel alone (possibly inside a Sequence): then decoding is the
  // concatenation of per-token byte strings, which the incremental detokenizer streams directly.
  virtual bool is_byte_level() const { return false; }
};

Expected<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config);

}  // namespace tf::text
