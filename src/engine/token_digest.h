// The SHA-256 of a reply's token ids (GenerationEvent::token_sha256): two replies with
// the same digest are the same tokens, whatever text the client saw. The trust check for
// speculative decoding (a drafted reply against its `draft: false` twin), for replies across
// restarts and builds, and for batch-mates (EXACT_ROWS).
//
// Over the ids as little-endian 32-bit integers, in order: sha256 of the bytes of
// `return_token_ids`' list, so a client can recompute it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

struct evp_md_ctx_st;

namespace tf::engine {

class TokenDigest {
 public:
  TokenDigest();
  ~TokenDigest();
  TokenDigest(TokenDigest&&) noexcept;
  TokenDigest& operator=(TokenDigest&&) noexcept;

  void add(int32_t token);
  // Lowercase hex of the digest of the ids added so far (more may follow).
  std::string hex() const;

 private:
  struct CtxFree {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, CtxFree> ctx_;
};

}  // namespace tf::engine
