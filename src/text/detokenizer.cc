// See detokenizer.h for the holdback rules and why they are sufficient.
#include "text/detokenizer.h"

#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

constexpr size_t kCleanUpHoldback = 19;  // code points; see detokenizer.h

// Byte offset where the last `n` code points of valid UTF-8 `s` begin.
size_t last_code_points_offset(std::string_view s, size_t n) {
  size_t i = s.size();
  while (n > 0 && i > 0) {
    --i;
    while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
    --n;
  }
  return i;
}

bool tail_has_space(std::string_view s, size_t n_cps) {
  return s.find(' ', last_code_points_offset(s, n_cps)) != std::string_view::npos;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(tokenizer),
      skip_special_(skip_special_tokens),
      byte_level_(tokenizer.decoder_is_byte_level()),
      clean_up_(tokenizer.clean_up_tokenization_spaces()) {}

std::string IncrementalDetokenizer::push_raw(const std::string& raw, bool at_end) {
  if (!clean_up_) return raw;
  window_raw_ += raw;
  const std::string cleaned = clean_up_tokenization(window_raw_);
  size_t stable = cleaned.size();
  const bool splits_here = !tail_has_space(window_raw_, 3);
  if (!at_end && !splits_here) stable = last_code_points_offset(cleaned, kCleanUpHoldback);
  std::string out;
  if (stable > window_emitted_) {
    out = cleaned.substr(window_emitted_, stable - window_emitted_);
    window_emitted_ = stable;
  }
  if (splits_here || at_end) {
    // Clean-up of what follows cannot reach back into the window: start a new one.
    window_raw_.clear();
    window_emitted_ = 0;
  }
  return out;
}

std::string IncrementalDetokenizer::add_generic(bool at_end) {
  if (!at_end) {
    // A run of <0xNN> byte-fallback tokens is decoded as a whole (and all of it becomes U+FFFD
    // when it is not valid UTF-8), so nothing is final until the run ends. Skipped special tokens
    // do not end a run: the decoder never sees them.
    for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) {
      if (skip_special_ && tok_.is_special(*it)) continue;
      const std::optional<std::string> last = tok_.id_to_token(*it);
      if (!last) continue;  // unknown ids are dropped by decode
      if (last->size() == 6 && last->compare(0, 3, "<0x") == 0 && (*last)[5] == '>') return {};
      break;
    }
  }
  std::string raw = tok_.decode_raw(ids_, skip_special_);
  size_t stable = raw.size();
  if (!at_end) {
    // A trailing U+FFFD may be an incomplete byte sequence; trailing whitespace may be stripped.
    while (stable > 0) {
      const size_t b = last_code_points_offset(std::string_view(raw).substr(0, stable), 1);
      const std::vector<char32_t> cp = to_code_points(std::string_view(raw).substr(b, stable - b));
      if (cp.size() != 1 || (cp[0] != kReplacementChar && !is_unicode_whitespace(cp[0]))) break;
      stable = b;
    }
  }
  // Raw text is final up to `stable`; only pass on the part beyond what was accounted for. If an
  // earlier guess turned out wrong (a decoder rewrote earlier text), the final decode in finish()
  // reconciles.
  std::string out;
  if (stable > generic_raw_emitted_.size() && raw.compare(0, generic_raw_emitted_.size(), generic_raw_emitted_) == 0) {
    out = raw.substr(generic_raw_emitted_.size(), stable - generic_raw_emitted_.size());
    generic_raw_emitted_ = raw.substr(0, stable);
  }
  return push_raw(out, at_end);
}

std::string IncrementalDetokenizer::add(TokenId id) {
  if (finished_) return {};
  ids_.push_back(id);
  if (!byte_level_) {
    std::string out = add_generic(false);
    emitted_ += out;
    return out;
  }
  std::string raw;
  if (const AddedToken* a = tok_.added_token(id)) {
    if (skip_special_ && a->special) return {};
    // An added token ends the current byte run: its incomplete tail becomes U+FFFD.
    raw = sanitize_utf8(pending_bytes_) + a->content;
    pending_bytes_.clear();
  } else if (std::optional<std::string> t = tok_.id_to_token(id)) {
    for (char32_t cp : to_code_points(*t)) {
      const int b = byte_level_decode_char(cp);
      if (b >= 0) {
        pending_bytes_.push_back(static_cast<char>(b));
      } else {
        append_utf8(pending_bytes_, cp);
      }
    }
    const size_t n = utf8_stable_prefix(pending_bytes_);
    raw = sanitize_utf8(std::string_view(pending_bytes_).substr(0, n));
    pending_bytes_.erase(0, n);
  }
  std::string out = push_raw(raw, false);
  emitted_ += out;
  return out;
}

std::string IncrementalDetokenizer::finish() {
  if (finished_) return {};
  finished_ = true;
  std::string out;
  if (byte_level_) {
    out = push_raw(sanitize_utf8(pending_bytes_), true);
    pending_bytes_.clear();
  } else {
    out = add_generic(true);
  }
  // Safety net: the full decode is the contract. When the streamed prefix is right (always, by
  // the rules above), this only re-derives `out`.
  const std::string full = tok_.decode(ids_, skip_special_);
  if (full.size() >= emitted_.size() && full.compare(0, emitted_.size(), emitted_) == 0) {
    out = full.substr(emitted_.size());
  }
  emitted_ += out;
  return out;
}

}  // namespace tf::text
