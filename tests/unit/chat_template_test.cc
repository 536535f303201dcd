// The chat-template module on GLM-5.3-Flash's official template: every conversation in
// tests/data/chat-templates/conversations.json renders exactly as Python's jinja2 renders it after
// the same message normalisation (tests/tools/render_templates.py --normalise, run at test time),
// and the thinking switch closes the open <think> of the generation prompt.
#include "text/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace {

using nlohmann::ordered_json;

const std::string kDataDir = std::string(TF_TEST_DATA_DIR) + "/chat-templates";
const std::string kTemplate = kDataDir + "/zai-org-GLM-5.3-Flash.jinja";
const std::string kTokenizerConfig = kDataDir + "/zai-org-GLM-5.3-Flash.tokenizer_config.json";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& normalised_reference() {
  static const ordered_json records = [] {
    // Private to this process: ctest may run several tests of this binary at once.
    std::string out =
        std::string(TF_BINARY_DIR) + "/chat_template_reference_" + std::to_string(::getpid()) + ".json";
    std::string cmd = std::string(TF_PYTHON) + " '" + TF_SOURCE_DIR +
                      "/tests/tools/render_templates.py' --templates '" + kDataDir + "' --conversations '" +
                      kDataDir + "/conversations.json' --normalise --only GLM-5.3 --out '" + out + "'";
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "reference renderer failed: " << cmd;
      return ordered_json::array();
    }
    ordered_json parsed = ordered_json::parse(read_file(out));
    std::remove(out.c_str());
    return parsed;
  }();
  return records;
}

tf::ChatTemplate load_glm() {
  auto t = tf::ChatTemplate::load(kTemplate, kTokenizerConfig);
  if (!t.has_value()) throw std::runtime_error(t.status().to_string());
  return std::move(t).value();
}

tf::ChatTemplateRequest request_of(const ordered_json& conversation) {
  tf::ChatTemplateRequest r;
  r.messages = conversation["messages"];
  r.tools = conversation.value("tools", ordered_json());
  r.add_generation_prompt = conversation.value("add_generation_prompt", false);
  r.kwargs = conversation.value("kwargs", ordered_json::object());
  return r;
}

tf::ChatTemplateRequest user_hi(ordered_json kwargs = ordered_json::object()) {
  tf::ChatTemplateRequest r;
  r.messages = ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  r.kwargs = std::move(kwargs);
  return r;
}

TEST(ChatTemplateGlm53, EveryConversationMatchesPythonAfterNormalisation) {
  tf::ChatTemplate glm = load_glm();
  ordered_json conversations = ordered_json::parse(read_file(kDataDir + "/conversations.json"));
  int rendered = 0, closed = 0;
  for (const auto& record : normalised_reference()) {
    SCOPED_TRACE(record["conversation"].get<std::string>());
    const ordered_json* conversation = nullptr;
    for (const auto& c : conversations)
      if (c["name"] == record["conversation"]) conversation = &c;
    ASSERT_NE(conversation, nullptr);
    tf::ChatTemplateRequest request = request_of(*conversation);
    auto context = glm.make_context(request);
    ASSERT_TRUE(context.has_value()) << context.status().to_string();
    EXPECT_EQ(*context, record["context"]) << "our template variables differ from transformers'";
    auto prompt = glm.render(request);
    if (record.contains("error")) {
      EXPECT_FALSE(prompt.has_value()) << "Python raised " << record["error"];
      continue;
    }
    ASSERT_TRUE(prompt.has_value()) << prompt.status().to_string();
    std::string expected = record["output"].get<std::string>();
    bool ends_open = expected.size() >= 7 && expected.compare(expected.size() - 7, 7, "<think>") == 0;
    if (request.add_generation_prompt && ends_open && tf::thinking_disabled(request.kwargs)) {
      expected += "</think>";  // docs/decisions.md: thinking off closes the think block
      EXPECT_TRUE(prompt->thinking_disabled);
      ++closed;
    }
    EXPECT_EQ(prompt->text, expected);
    EXPECT_EQ(prompt->reasoning_open, request.add_generation_prompt && !prompt->thinking_disabled);
    ++rendered;
  }
  EXPECT_GE(rendered, 40);
  EXPECT_GE(closed, 2);  // reasoning_effort none, enable_thinking false
}

// glm53-checkpoint-facts.md §3: low/high render as such; anything else renders as Max.
TEST(ChatTemplateGlm53, ReasoningEffortLine) {
  tf::ChatTemplate glm = load_glm();
  const std::pair<const char*, const char*> cases[] = {{"low", "Low"}, {"high", "High"}, {"medium", "Max"},
                                                       {"max", "Max"}, {"xhigh", "Max"}, {"none", "Max"}};
  for (const auto& [effort, shown] : cases) {
    auto p = glm.render(user_hi({{"reasoning_effort", effort}}));
    ASSERT_TRUE(p.has_value()) << p.status().to_string();
    EXPECT_NE(p->text.find(std::string("<|system|>Reasoning Effort: ") + shown + "<|user|>"),
              std::string::npos)
        << effort << ": " << p->text;
  }
  auto p = glm.render(user_hi());
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->text, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>");
  EXPECT_TRUE(p->reasoning_open);
  EXPECT_FALSE(p->thinking_disabled);
}

TEST(ChatTemplateGlm53, ThinkingOffClosesTheThinkBlock) {
  tf::ChatTemplate glm = load_glm();
  for (const ordered_json& kwargs :
       {ordered_json{{"reasoning_effort", "none"}}, ordered_json{{"enable_thinking", false}}}) {
    auto p = glm.render(user_hi(kwargs));
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->text, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think></think>");
    EXPECT_FALSE(p->reasoning_open);
    EXPECT_TRUE(p->thinking_disabled);
  }
  auto on = glm.render(user_hi({{"enable_thinking", true}, {"reasoning_effort", "high"}}));
  ASSERT_TRUE(on.has_value());
  EXPECT_TRUE(on->reasoning_open);
  // Without a generation prompt nothing is appended.
  tf::ChatTemplateRequest r = user_hi({{"reasoning_effort", "none"}});
  r.add_generation_prompt = false;
  auto off = glm.render(r);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(off->text, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi");
  EXPECT_FALSE(off->thinking_disabled);
}

TEST(ChatTemplateGlm53, SpecialTokensFromTokenizerConfig) {
  tf::ChatTemplate glm = load_glm();
  ASSERT_TRUE(glm.eos_token().has_value());
  EXPECT_EQ(*glm.eos_token(), "<|endoftext|>");
  EXPECT_FALSE(glm.bos_token().has_value());  // the template writes [gMASK]<sop> itself
  auto ctx = glm.make_context(user_hi());
  ASSERT_TRUE(ctx.has_value());
  EXPECT_EQ((*ctx)["eos_token"], "<|endoftext|>");
  EXPECT_FALSE(ctx->contains("bos_token"));
  EXPECT_TRUE((*ctx)["tools"].is_null());
  EXPECT_TRUE((*ctx)["documents"].is_null());
}

TEST(ChatTemplateGlm53, StringArgumentsAreParsedForTheTemplate) {
  tf::ChatTemplate glm = load_glm();
  tf::ChatTemplateRequest r;
  r.messages = ordered_json::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "reasoning": "call it",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])");
  auto p = glm.render(r);
  ASSERT_TRUE(p.has_value()) << p.status().to_string();
  EXPECT_NE(
      p->text.find("<|assistant|><think>call it</think><tool_call>get_weather<arg_key>city</arg_key>"
                   "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"
                   "<|observation|><tool_response>sunny</tool_response><|assistant|><think>"),
      std::string::npos)
      << p->text;
}

// A turn of tool calls sent back as OpenAI's clients send it (content null) or without content
// renders as one with empty content, as vLLM parses it; rendered as is, Jinja prints "None".
TEST(ChatTemplateGlm53, NullContentIsEmptyText) {
  tf::ChatTemplate glm = load_glm();
  auto render = [&](ordered_json assistant) {
    tf::ChatTemplateRequest r;
    assistant["role"] = "assistant";
    assistant["tool_calls"] = ordered_json::parse(
        R"([{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}])");
    r.messages = ordered_json::array({{{"role", "user"}, {"content", "Weather?"}},
                                      assistant,
                                      {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}});
    auto p = glm.render(r);
    EXPECT_TRUE(p.has_value()) << p.status().to_string();
    return p.has_value() ? p->text : std::string();
  };
  const std::string empty = render({{"content", ""}});
  EXPECT_EQ(render({{"content", nullptr}}), empty);
  EXPECT_EQ(render(ordered_json::object()), empty);
  EXPECT_EQ(empty.find("None"), std::string::npos) << empty;
  EXPECT_NE(empty.find("<|assistant|><think></think><tool_call>get_weather</tool_call>"), std::string::npos)
      << empty;
}

// Normalisation adds keys in the order render_templates.py's normalise_messages does (content,
// then reasoning_content), which a template printing a whole message shows.
TEST(ChatTemplate, NormalisedKeysKeepTheReferenceOrder) {
  auto t = tf::ChatTemplate::create("{{ messages | tojson }}", nlohmann::json::object());
  ASSERT_TRUE(t.has_value());
  tf::ChatTemplateRequest r;
  r.messages = ordered_json::parse(R"([{"role": "developer", "reasoning": "r", "content": null},
                                       {"role": "assistant", "reasoning": "why"}])");
  auto p = t->render(r);
  ASSERT_TRUE(p.has_value()) << p.status().to_string();
  EXPECT_EQ(p->text,
            R"([{"role": "system", "reasoning": "r", "content": "", "reasoning_content": "r"}, )"
            R"({"role": "assistant", "reasoning": "why", "content": "", "reasoning_content": "why"}])");
}

TEST(ChatTemplate, ErrorsNameTheProblem) {
  auto bad =
      tf::ChatTemplate::create("{% if x %}\n{{ 1 + }}{% endif %}", nlohmann::json::object(), "bad.jinja");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("bad.jinja:2:"), std::string::npos) << bad.status().message();

  auto raising =
      tf::ChatTemplate::create("line1\n{{ raise_exception('no system role') }}", nlohmann::json::object());
  ASSERT_TRUE(raising.has_value());
  auto r = raising->render(user_hi());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("no system role"), std::string::npos);
  EXPECT_NE(r.status().message().find(":2:"), std::string::npos) << r.status().message();

  auto ok = tf::ChatTemplate::create("{{ messages[0].content }}", nlohmann::json::object());
  ASSERT_TRUE(ok.has_value());
  tf::ChatTemplateRequest not_array;
  not_array.messages = ordered_json::object();
  EXPECT_FALSE(ok->render(not_array).has_value());

  EXPECT_FALSE(tf::ChatTemplate::load(kDataDir + "/does-not-exist.jinja", "").has_value());
}

TEST(ChatTemplate, StrftimeNowUsesTheGivenTime) {
  auto t = tf::ChatTemplate::create("{{ strftime_now('%d %b %Y') }}", nlohmann::json::object());
  ASSERT_TRUE(t.has_value());
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  tf::jinja::RenderOptions options;
  options.now = std::mktime(&tm);
  auto p = t->render(user_hi(), options);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->text, "26 Jul 2024");
}

}  // namespace

namespace {

// The special-token table agrees with tokenizer_config.json, and every marker the official template
// writes over all test conversations is one of those tokens.
TEST(ChatTemplateGlm53, SpecialTokenTable) {
  const auto& tokens = tf::glm53_special_tokens();
  ASSERT_EQ(tokens.size(), 36u);
  EXPECT_EQ(tokens.front().id, 154820);
  EXPECT_EQ(tokens.back().id, 154855);
  auto id_of = [&](const std::string& text) {
    for (const auto& t : tokens)
      if (text == t.text) return t.id;
    return -1;
  };
  // Ids the checkpoint facts confirm independently (config.json, vLLM tests, encode tests).
  EXPECT_EQ(id_of("[gMASK]"), 154822);
  EXPECT_EQ(id_of("<|assistant|>"), 154828);
  EXPECT_EQ(id_of("<think>"), 154841);
  EXPECT_EQ(id_of("</arg_value>"), 154850);
  EXPECT_EQ(id_of("<|image|>"), 154854);
  EXPECT_EQ(tf::glm53_eos_token_ids(),
            (std::vector<int32_t>{id_of("<|endoftext|>"), id_of("<|user|>"), id_of("<|observation|>")}));
  nlohmann::json config = nlohmann::json::parse(read_file(kTokenizerConfig));
  const auto& extra = config["extra_special_tokens"];
  ASSERT_EQ(extra.size(), 18u);
  for (size_t i = 0; i < extra.size(); ++i) EXPECT_EQ(extra[i].get<std::string>(), tokens[i].text);

  // Markers in rendered prompts: "<|...|>", "[..MASK]", and <tag>/</tag> from the table.
  int checked = 0;
  for (const auto& record : normalised_reference()) {
    if (!record.contains("output")) continue;
    const std::string out = record["output"].get<std::string>();
    for (size_t p = out.find("<|"); p != std::string::npos; p = out.find("<|", p + 2)) {
      size_t e = out.find("|>", p);
      ASSERT_NE(e, std::string::npos);
      EXPECT_NE(id_of(out.substr(p, e + 2 - p)), -1) << out.substr(p, e + 2 - p);
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace

// A template that fails to load names its whole path (the operator reads it at start); one that
// fails while rendering a request names only its file (the message is the client's 400).
TEST(ChatTemplateErrors, RenderErrorsNameTheFileNotTheServersFolders) {
  const std::string path = "/srv/models/secret-folder/chat_template.jinja";
  auto broken = tf::ChatTemplate::create("{% if %}", nlohmann::json::object(), path);
  ASSERT_FALSE(broken.has_value());
  EXPECT_NE(broken.status().message().find(path), std::string::npos) << broken.status().message();
  auto tmpl =
      tf::ChatTemplate::create("{{ messages[0].content.missing.deeper }}", nlohmann::json::object(), path);
  ASSERT_TRUE(tmpl.has_value()) << tmpl.status().to_string();
  auto out = tmpl->render(user_hi());
  ASSERT_FALSE(out.has_value());
  const std::string message = out.status().message();
  EXPECT_NE(message.find("chat_template.jinja:1:"), std::string::npos) << message;
  EXPECT_EQ(message.find("secret-folder"), std::string::npos) << message;
}
