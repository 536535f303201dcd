// Loading wires the tokenizer.json parts together; encode/decode follow the order described in
// tokenizer.h. Added tokens from tokenizer_config.json's added_tokens_decoder that tokenizer.json
// lacks are added too (transformers does the same), unless the vocab holds another token at that id.
#include "text/tokenizer.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "core/replace_all.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace tf::text {

using json = nlohmann::json;

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_json(const json& j, TokenizerConfig config,
                                                          GenerationConfig generation) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->config_ = std::move(config);
  t->generation_ = std::move(generation);
  TF_RETURN_IF_ERROR(t->init(j));
  return t;
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::filesystem::path& path) {
  TF_ASSIGN_OR_RETURN(json j, read_json_file(path));
  Expected<std::unique_ptr<Tokenizer>> t = from_json(j);
  if (!t) return t.status().with_context(path.string());
  return t;
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  TokenizerConfig config;
  GenerationConfig generation;
  if (std::filesystem::exists(dir / "tokenizer_config.json", ec)) {
    TF_ASSIGN_OR_RETURN(config, load_tokenizer_config(dir / "tokenizer_config.json"));
  } else if (std::filesystem::exists(dir / "chat_template.jinja", ec)) {
    TF_ASSIGN_OR_RETURN(std::string t, read_text_file(dir / "chat_template.jinja"));
    config.chat_template = std::move(t);
  }
  if (std::filesystem::exists(dir / "generation_config.json", ec)) {
    TF_ASSIGN_OR_RETURN(generation, load_generation_config(dir / "generation_config.json"));
  }
  const std::filesystem::path path = dir / "tokenizer.json";
  TF_ASSIGN_OR_RETURN(json j, read_json_file(path));
  Expected<std::unique_ptr<Tokenizer>> t = from_json(j, std::move(config), std::move(generation));
  if (!t) return t.status().with_context(path.string());
  return t;
}

Status Tokenizer::init(const json& j) {
  if (!j.is_object() || !j.contains("model")) return invalid_argument("tokenizer.json: no \"model\" object");
  auto field = [&](const char* key) -> const json& {
    static const json kNull;
    return j.contains(key) ? j.at(key) : kNull;
  };
  TF_ASSIGN_OR_RETURN(model_, make_model(j.at("model"), config_.unk_token));
  TF_ASSIGN_OR_RETURN(normalizer_, make_normalizer(field("normalizer")));
  TF_ASSIGN_OR_RETURN(pre_tokenizer_, make_pre_tokenizer(field("pre_tokenizer")));
  TF_ASSIGN_OR_RETURN(post_processor_, make_post_processor(field("post_processor")));
  TF_ASSIGN_OR_RETURN(decoder_, make_decoder(field("decoder")));
  if (spm_non_legacy()) {
    // transformers.js's LlamaTokenizer (after transformers PR 24565) drops the file's normalizer
    // (its Prepend/Replace) for a Metaspace pre-tokenizer that prefixes the first section only.
    normalizer_.reset();
    TF_ASSIGN_OR_RETURN(pre_tokenizer_, make_pre_tokenizer(json{{"type", "Metaspace"},
                                                                {"replacement", "\u2581"},
                                                                {"add_prefix_space", true},
                                                                {"prepend_scheme", "first"}}));
  }

  size_t entry = 0;  // named in errors
  try {
    if (field("added_tokens").is_array()) {
      for (const json& a : field("added_tokens")) {
        AddedToken t;
        t.content = a.at("content").get<std::string>();
        t.id = a.at("id").get<TokenId>();
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.normalized = a.value("normalized", !t.special);
        t.single_word = a.value("single_word", false);
        if (t.id < 0) return invalid_argument("tokenizer.json: added token \"" + t.content + "\" has a negative id");
        added_.push_back(std::move(t));
        ++entry;
      }
    }
  } catch (const json::exception& e) {
    return invalid_argument("tokenizer.json added_tokens[" + std::to_string(entry) +
                            "]: expected an object with a string \"content\" and an integer \"id\" (" +
                            e.what() + ")");
  }
  for (const auto& [id, t] : config_.added_tokens_decoder) {
    const bool known = std::any_of(added_.begin(), added_.end(), [&](const AddedToken& a) { return a.id == id; });
    // An id the model's vocab gives another token keeps it: tokenizer.json is what transformers.js
    // and the Rust library read (a config declaring "  " at a vocab word's id split "  " apart).
    const std::string* in_vocab = model_->id_to_token(id);
    if (!known && (in_vocab == nullptr || *in_vocab == t.content)) added_.push_back(t);
  }
  for (AddedToken& t : added_) {
    // additional_special_tokens are skipped by decode(skip_special_tokens) like other specials.
    for (const std::string& s : config_.additional_special_tokens) {
      if (s == t.content) t.special = true;
    }
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_id_.emplace(added_[i].id, i);
    added_by_content_.emplace(added_[i].content, added_[i].id);
  }
  raw_matcher_ = AddedTokenMatcher(added_, /*normalized=*/false);
  // Without a normalizer, "normalized" tokens are matched in the raw text as well.
  normalized_matcher_ = AddedTokenMatcher(added_, /*normalized=*/true);
  vocab_size_ = model_->vocab_size();
  for (const AddedToken& t : added_) vocab_size_ = std::max(vocab_size_, static_cast<size_t>(t.id) + 1);
  return Status::ok();
}

void Tokenizer::encode_segment(std::string_view text, bool first_section, std::vector<TokenId>& out) const {
  const size_t first = out.size();
  // Each word goes to the model as soon as the pre-tokenizer cuts it (see pre_tokenizer.h).
  const auto encode_word = [&](std::string_view word) { model_->encode_word(word, out); };
  if (pre_tokenizer_) {
    pre_tokenizer_->pre_tokenize(text, first_section, encode_word);
  } else {
    encode_word(text);
  }
  // transformers.js fuses unknown tokens over the whole section, across its words.
  const std::optional<TokenId> unk = model_->unk_id();
  if (unk && model_->fuse_unk()) {
    size_t w = first;
    for (size_t r = first; r < out.size(); ++r) {
      if (out[r] == *unk && w > first && out[w - 1] == *unk) continue;
      out[w++] = out[r];
    }
    out.resize(w);
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  std::string sanitized;
  if (!is_valid_utf8(input)) {
    sanitized = sanitize_utf8(input);
    input = sanitized;
  }
  std::vector<TokenId> ids;
  if (spm_non_legacy() && !input.empty()) {
    static constexpr std::string_view kSpace = "\u2581";
    encode_sections(std::string(kSpace) + replace_all(input, kSpace, " "), ids);
    if (ids.size() > 1 && id_to_token(ids[0]) == kSpace && is_special(ids[1])) ids.erase(ids.begin());
  } else {
    encode_sections(input, ids);
  }
  if (post_processor_) post_processor_->process(ids, add_special_tokens);
  return ids;
}

void Tokenizer::encode_sections(std::string_view input, std::vector<TokenId>& ids) const {
  // Everything streams from here on: the matchers hand out one segment at a time and each
  // segment is encoded before the next is cut, so beside the input only one normalized segment
  // and the ids are held.
  raw_matcher_.for_each_segment(input, [&](const TextSegment& seg) {
    if (seg.token != nullptr) {
      ids.push_back(seg.token->id);
      return;
    }
    if (seg.text.empty()) return;
    const bool first = seg.text.data() == input.data();
    std::string normalized_copy;
    std::string_view normalized = seg.text;
    if (config_.remove_space) {
      normalized_copy = js_remove_space(normalized);
      normalized = normalized_copy;
    }
    if (config_.do_lowercase_and_remove_accent) {
      normalized_copy = js_lowercase_and_remove_accent(normalized);
      normalized = normalized_copy;
    }
    if (normalizer_) {
      normalized_copy = normalizer_->normalize(normalized);
      normalized = normalized_copy;
    }
    if (normalized.empty()) return;
    normalized_matcher_.for_each_segment(normalized, [&](const TextSegment& sub) {
      if (sub.token != nullptr) {
        ids.push_back(sub.token->id);
      } else if (!sub.text.empty()) {
        encode_segment(sub.text, first && sub.text.data() == normalized.data(), ids);
      }
    });
  });
}

std::string Tokenizer::decode_raw(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::vector<DecodePiece> pieces;
  pieces.reserve(ids.size());
  for (TokenId id : ids) {
    if (const AddedToken* a = added_token(id)) {
      if (skip_special_tokens && a->special) continue;
      pieces.push_back({a->content, true});
      continue;
    }
    if (const std::string* t = model_->id_to_token(id)) pieces.push_back({*t, false});
    // Unknown ids are dropped, as in Hugging Face tokenizers.
  }
  if (decoder_) {
    decoder_->decode_chain(pieces);
    std::string out;
    for (const DecodePiece& p : pieces) out += p.text;
    // transformers.js turns BPE's end_of_word_suffix into spaces after the decoder (and trims when
    // special tokens are skipped).
    const std::string& suffix = model_->end_of_word_suffix();
    if (!suffix.empty()) {
      std::string replaced = replace_all(out, suffix, " ");
      out = skip_special_tokens ? js_trim(replaced) : std::move(replaced);
    }
    return out;
  }
  // No decoder: tokens joined by spaces (Hugging Face's default).
  std::string out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) out.push_back(' ');
    out += pieces[i].text;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string raw = decode_raw(ids, skip_special_tokens);
  return config_.clean_up_tokenization_spaces ? clean_up_tokenization(raw) : raw;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  if (const AddedToken* a = added_token(id)) return a->content;
  const std::string* t = model_->id_to_token(id);
  if (t == nullptr) return {};
  if (decoder_is_byte_level()) {
    std::string out;
    for (char32_t cp : to_code_points(*t)) {
      const int b = byte_level_decode_char(cp);
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        append_utf8(out, cp);
      }
    }
    return out;
  }
  // SentencePiece byte fallback: <0xNN> is the byte NN.
  if (t->size() == 6 && t->starts_with("<0x") && t->back() == '>') {
    const std::string hex = t->substr(3, 2);
    if (std::isxdigit(static_cast<unsigned char>(hex[0])) && std::isxdigit(static_cast<unsigned char>(hex[1]))) {
      return std::string(1, static_cast<char>(std::stoi(hex, nullptr, 16)));
    }
  }
  const TokenId ids[1] = {id};
  return decode_raw(ids, false);
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  auto it = added_by_content_.find(std::string(token));
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (const AddedToken* a = added_token(id)) return a->content;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

const AddedToken* Tokenizer::added_token(TokenId id) const {
  auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &added_[it->second];
}

bool Tokenizer::is_special(TokenId id) const {
  const AddedToken* a = added_token(id);
  return a != nullptr && a->special;
}

std::optional<TokenId> Tokenizer::bos_token_id() const {
  if (generation_.bos_token_id) return generation_.bos_token_id;
  if (config_.bos_token) return token_to_id(*config_.bos_token);
  return std::nullopt;
}

std::vector<TokenId> Tokenizer::eos_token_ids() const {
  if (!generation_.eos_token_ids.empty()) return generation_.eos_token_ids;
  if (config_.eos_token) {
    if (auto id = token_to_id(*config_.eos_token)) return {*id};
  }
  return {};
}

std::string clean_up_tokenization(std::string_view text) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string s(text);
  for (const auto& [from, to] : kRules) {
    if (s.find(from) == std::string::npos) continue;
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (true) {
      const size_t f = s.find(from, pos);
      if (f == std::string::npos) break;
      out.append(s, pos, f - pos);
      out += to;
      pos = f + from.size();
    }
    out.append(s, pos, std::string::npos);
    s = std::move(out);
  }
  return s;
}

}  // namespace tf::text
