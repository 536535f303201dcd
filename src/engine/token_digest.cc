// See token_digest.h.
#include "engine/token_digest.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace tf::engine {

void TokenDigest::CtxFree::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

TokenDigest::TokenDigest() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256: the digest context could not be made");
}

TokenDigest::~TokenDigest() = default;
TokenDigest::TokenDigest(TokenDigest&&) noexcept = default;
TokenDigest& TokenDigest::operator=(TokenDigest&&) noexcept = default;

void TokenDigest::add(int32_t token) {
  const auto u = static_cast<uint32_t>(token);
  const unsigned char le[4] = {static_cast<unsigned char>(u), static_cast<unsigned char>(u >> 8),
                               static_cast<unsigned char>(u >> 16), static_cast<unsigned char>(u >> 24)};
  EVP_DigestUpdate(ctx_.get(), le, sizeof le);
}

std::string TokenDigest::hex() const {
  std::unique_ptr<EVP_MD_CTX, CtxFree> done(EVP_MD_CTX_new());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!done || EVP_MD_CTX_copy_ex(done.get(), ctx_.get()) != 1 || EVP_DigestFinal_ex(done.get(), md, &n) != 1)
    return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

}  // namespace tf::engine
