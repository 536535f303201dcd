// TemplateProcessing's "single" template is a list of {"SpecialToken": {"id": NAME}} and
// {"Sequence": {"id": "A"}} items; NAME is looked up in "special_tokens", whose "ids" are inserted.
#include "text/post_processor.h"

#include <nlohmann/json.hpp>

namespace tf::text {
namespace {

using json = nlohmann::json;

class TemplateProcessor final : public PostProcessor {
 public:
  // Each item: the ids of a special token, or (empty + is_sequence) the input.
  struct Item {
    bool is_sequence;
    std::vector<TokenId> ids;
  };
  explicit TemplateProcessor(std::vector<Item> items) : items_(std::move(items)) {}
  void process(std::vector<TokenId>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<TokenId> out;
    out.reserve(ids.size() + 4);
    for (const Item& it : items_) {
      if (it.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), it.ids.begin(), it.ids.end());
      }
    }
    ids = std::move(out);
  }

 private:
  std::vector<Item> items_;
};

class NoopProcessor final : public PostProcessor {
 public:
  void process(std::vector<TokenId>&, bool) const override {}
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<TokenId>& ids, bool add) const override {
    for (const auto& p : parts_) p->process(ids, add);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

Expected<std::unique_ptr<PostProcessor>> build(const json& c) {
  if (c.is_null()) return std::unique_ptr<PostProcessor>();
  if (!c.is_object() || !c.contains("type")) return invalid_argument("post_processor: expected an object with \"type\"");
  const std::string type = c.at("type").get<std::string>();
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new NoopProcessor());
  if (type == "TemplateProcessing") {
    std::vector<TemplateProcessor::Item> items;
    const json& specials = c.contains("special_tokens") ? c.at("special_tokens") : json::object();
    for (const json& item : c.at("single")) {
      if (item.contains("Sequence")) {
        items.push_back({true, {}});
      } else if (item.contains("SpecialToken")) {
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        if (!specials.contains(name)) {
          return invalid_argument("post_processor TemplateProcessing: special token \"" + name +
                                  "\" is not in special_tokens");
        }
        items.push_back({false, specials.at(name).at("ids").get<std::vector<TokenId>>()});
      } else {
        return invalid_argument("post_processor TemplateProcessing: unknown template item " + item.dump());
      }
    }
    return std::unique_ptr<PostProcessor>(new TemplateProcessor(std::move(items)));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const TokenId cls = c.at("cls").at(1).get<TokenId>();
    const TokenId sep = c.at("sep").at(1).get<TokenId>();
    return std::unique_ptr<PostProcessor>(
        new TemplateProcessor({{false, {cls}}, {true, {}}, {false, {sep}}}));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const json& p : c.at("processors")) {
      TF_ASSIGN_OR_RETURN(auto q, build(p));
      if (q) parts.push_back(std::move(q));
    }
    return std::unique_ptr<PostProcessor>(new SequenceProcessor(std::move(parts)));
  }
  return unimplemented("post_processor type \"" + type + "\" is not supported");
}

}  // namespace

Expected<std::unique_ptr<PostProcessor>> make_post_processor(const json& config) {
  try {
    return build(config);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("post_processor: ") + e.what());
  }
}

}  // namespace tf::text
