// make_model() and the WordLevel model (a plain vocabulary lookup per word; transformers.js runs
// such vocab-only models through its LegacyTokenizerModel, which does exactly that).
#include "text/model.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "text/bpe.h"
#include "text/unigram.h"
#include "text/wordpiece.h"

namespace tf::text {
namespace {

using json = nlohmann::json;

class WordLevelModel final : public Model {
 public:
  static Expected<std::unique_ptr<Model>> from_json(const json& m, const std::optional<std::string>& config_unk) {
    std::unique_ptr<WordLevelModel> w(new WordLevelModel());
    if (!m.contains("vocab")) return invalid_argument("model.vocab: missing");
    TF_RETURN_IF_ERROR(read_vocab_object(m.at("vocab"), "model.vocab", w->vocab_, w->id_to_token_, w->has_token_));
    // transformers.js takes the unk token from tokenizer_config.json; the model's own is the fallback.
    std::optional<std::string> unk = config_unk;
    if (!unk && m.contains("unk_token") && m.at("unk_token").is_string()) unk = m.at("unk_token").get<std::string>();
    if (unk) {
      auto it = w->vocab_.find(*unk);
      if (it != w->vocab_.end()) w->unk_ = it->second;
    }
    return std::unique_ptr<Model>(std::move(w));
  }
  // A word not in the vocabulary is unk, or nothing when there is no unk token.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const override {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
    } else if (unk_) {
      out.push_back(*unk_);
    }
  }
  std::optional<TokenId> token_to_id(std::string_view token) const override {
    auto it = vocab_.find(std::string(token));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* id_to_token(TokenId id) const override {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[static_cast<size_t>(id)]) return nullptr;
    return &id_to_token_[static_cast<size_t>(id)];
  }
  size_t vocab_size() const override { return id_to_token_.size(); }
  std::optional<TokenId> unk_id() const override { return unk_; }

 private:
  WordLevelModel() = default;
  std::unordered_map<std::string, TokenId> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::optional<TokenId> unk_;
};

}  // namespace

Expected<std::unique_ptr<Model>> make_model(const json& m, const std::optional<std::string>& unk_token) {
  try {
    if (!m.is_object()) return invalid_argument("tokenizer.json: \"model\" is not an object");
    std::string type;
    if (m.contains("type") && !m.at("type").is_null()) {
      if (!m.at("type").is_string()) return invalid_argument("model.type: expected a string, got " + m.at("type").dump());
      type = m.at("type").get<std::string>();
    } else if (m.contains("vocab") && m.at("vocab").is_array()) {
      type = "Unigram";
    } else if (!m.contains("merges") && m.contains("continuing_subword_prefix") && m.contains("unk_token")) {
      type = "WordPiece";
    } else {
      type = "BPE";
    }
    if (type == "BPE") {
      TF_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::from_json(m));
      return std::unique_ptr<Model>(std::make_unique<BpeModel>(std::move(bpe)));
    }
    if (type == "WordPiece") {
      TF_ASSIGN_OR_RETURN(auto wp, WordPieceModel::from_json(m));
      return std::unique_ptr<Model>(std::move(wp));
    }
    if (type == "Unigram") {
      TF_ASSIGN_OR_RETURN(auto u, UnigramModel::from_json(m));
      return std::unique_ptr<Model>(std::move(u));
    }
    if (type == "WordLevel") return WordLevelModel::from_json(m, unk_token);
    return unimplemented("tokenizer model type \"" + type + "\" is not supported (BPE, WordPiece, Unigram, WordLevel)");
  } catch (const json::exception& e) {
    return invalid_argument(std::string("tokenizer model: ") + e.what());
  }
}

}  // namespace tf::text
