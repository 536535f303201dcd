// Token fields may be a plain string, null, or an AddedToken object ({"__type": "AddedToken",
// "content": ...}); all three forms occur in published checkpoints.
#include "text/tokenizer_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tf::text {

using json = nlohmann::json;

namespace {

std::optional<std::string> token_field(const json& j, const char* key) {
  if (!j.contains(key)) return std::nullopt;
  const json& v = j.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return std::nullopt;
}

}  // namespace

Expected<std::string> read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return invalid_argument(path.string() + ": read error");
  return ss.str();
}

Expected<json> read_json_file(const std::filesystem::path& path) {
  TF_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return invalid_argument(path.string() + ": " + e.what());
  }
}

Expected<TokenizerConfig> parse_tokenizer_config(const json& j) {
  if (!j.is_object()) return invalid_argument("tokenizer_config: expected a JSON object");
  try {
    TokenizerConfig c;
    c.bos_token = token_field(j, "bos_token");
    c.eos_token = token_field(j, "eos_token");
    c.pad_token = token_field(j, "pad_token");
    c.unk_token = token_field(j, "unk_token");
    if (j.contains("clean_up_tokenization_spaces") && j.at("clean_up_tokenization_spaces").is_boolean()) {
      c.clean_up_tokenization_spaces = j.at("clean_up_tokenization_spaces").get<bool>();
    }
    if (j.contains("add_bos_token") && j.at("add_bos_token").is_boolean()) c.add_bos_token = j.at("add_bos_token").get<bool>();
    if (j.contains("add_eos_token") && j.at("add_eos_token").is_boolean()) c.add_eos_token = j.at("add_eos_token").get<bool>();
    if (j.contains("legacy") && j.at("legacy").is_boolean()) c.legacy = j.at("legacy").get<bool>();
    for (auto [key, flag] :
         {std::pair{"remove_space", &c.remove_space},
          std::pair{"do_lowercase_and_remove_accent", &c.do_lowercase_and_remove_accent}}) {
      if (j.contains(key) && j.at(key).is_boolean()) *flag = j.at(key).get<bool>();
    }
    if (j.contains("tokenizer_class") && j.at("tokenizer_class").is_string()) {
      std::string cls = j.at("tokenizer_class").get<std::string>();
      if (cls.size() > 4 && cls.ends_with("Fast")) cls.resize(cls.size() - 4);
      c.tokenizer_class = std::move(cls);
    }
    for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
      if (!j.contains(key) || !j.at(key).is_array()) continue;
      for (const json& t : j.at(key)) {
        if (t.is_string()) c.additional_special_tokens.push_back(t.get<std::string>());
        else if (t.is_object() && t.contains("content")) c.additional_special_tokens.push_back(t.at("content").get<std::string>());
      }
    }
    if (j.contains("added_tokens_decoder") && j.at("added_tokens_decoder").is_object()) {
      for (auto it = j.at("added_tokens_decoder").begin(); it != j.at("added_tokens_decoder").end(); ++it) {
        AddedToken t;
        try {
          t.id = static_cast<TokenId>(std::stol(it.key()));
        } catch (const std::exception&) {
          return invalid_argument("tokenizer_config: added_tokens_decoder key \"" + it.key() + "\" is not an id");
        }
        const json& v = it.value();
        t.content = v.at("content").get<std::string>();
        t.special = v.value("special", false);
        t.lstrip = v.value("lstrip", false);
        t.rstrip = v.value("rstrip", false);
        t.normalized = v.value("normalized", !t.special);
        t.single_word = v.value("single_word", false);
        c.added_tokens_decoder[t.id] = t;
      }
    }
    if (j.contains("chat_template")) {
      const json& ct = j.at("chat_template");
      if (ct.is_string()) {
        c.chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {
        for (const json& e : ct) c.named_chat_templates[e.at("name").get<std::string>()] = e.at("template").get<std::string>();
        auto d = c.named_chat_templates.find("default");
        if (d != c.named_chat_templates.end()) c.chat_template = d->second;
      }
    }
    return c;
  } catch (const json::exception& e) {
    return invalid_argument(std::string("tokenizer_config: ") + e.what());
  }
}

Expected<TokenizerConfig> load_tokenizer_config(const std::filesystem::path& path) {
  TF_ASSIGN_OR_RETURN(json j, read_json_file(path));
  Expected<TokenizerConfig> c = parse_tokenizer_config(j);
  if (!c) return c.status().with_context(path.string());
  const std::filesystem::path jinja = path.parent_path() / "chat_template.jinja";
  std::error_code ec;
  if (std::filesystem::exists(jinja, ec)) {
    TF_ASSIGN_OR_RETURN(std::string t, read_text_file(jinja));
    c->chat_template = std::move(t);
  }
  return c;
}

Expected<GenerationConfig> parse_generation_config(const json& j) {
  if (!j.is_object()) return invalid_argument("generation_config: expected a JSON object");
  GenerationConfig g;
  auto int_field = [&](const char* key) -> std::optional<TokenId> {
    if (j.contains(key) && j.at(key).is_number_integer()) return j.at(key).get<TokenId>();
    return std::nullopt;
  };
  if (j.contains("eos_token_id")) {
    const json& e = j.at("eos_token_id");
    if (e.is_number_integer()) {
      g.eos_token_ids.push_back(e.get<TokenId>());
    } else if (e.is_array()) {
      for (const json& x : e) {
        if (!x.is_number_integer()) return invalid_argument("generation_config: eos_token_id list holds a non-integer " + x.dump());
        g.eos_token_ids.push_back(x.get<TokenId>());
      }
    } else if (!e.is_null()) {
      return invalid_argument("generation_config: eos_token_id must be an integer or a list, got " + e.dump());
    }
  }
  g.bos_token_id = int_field("bos_token_id");
  g.pad_token_id = int_field("pad_token_id");
  return g;
}

Expected<GenerationConfig> load_generation_config(const std::filesystem::path& path) {
  TF_ASSIGN_OR_RETURN(json j, read_json_file(path));
  Expected<GenerationConfig> g = parse_generation_config(j);
  if (!g) return g.status().with_context(path.string());
  return g;
}

}  // namespace tf::text
