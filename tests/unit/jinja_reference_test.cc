// Parity with Python's jinja2: tests/tools/render_templates.py renders, at test time, every chat
// template in tests/data/chat-templates/ over the conversations in conversations.json (and the
// feature snippets in jinja_snippets.json) with transformers' environment; each output must equal
// ours byte for byte, and a case that raised in Python must fail here too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "jinja_test_util.h"
#include "text/jinja_template.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

using tf::jinja_test::fixed_now;
using tf::jinja_test::kDataDir;
using tf::jinja_test::read_file;

// Runs the reference renderer (once per template, or once for the snippets) and returns its
// records. The output file is private to this process: ctest may run several of these at once.
const ordered_json& reference(const std::string& only_template) {
  static std::map<std::string, ordered_json> cache;
  auto it = cache.find(only_template);
  if (it != cache.end()) return it->second;
  std::string out = std::string(TF_BINARY_DIR) + "/jinja_reference_" + std::to_string(::getpid()) + ".json";
  std::string script = std::string(TF_SOURCE_DIR) + "/tests/tools/render_templates.py";
  std::string args = only_template.empty() ? "--snippets '" + kDataDir + "/jinja_snippets.json'"
                                           : "--templates '" + kDataDir + "' --conversations '" + kDataDir +
                                                 "/conversations.json' --only '" + only_template + "'";
  std::string cmd = std::string(TF_PYTHON) + " '" + script + "' " + args + " --out '" + out + "'";
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "reference renderer failed (" << rc << "): " << cmd;
    return cache[only_template] = ordered_json::array();
  }
  ordered_json records = ordered_json::parse(read_file(out));
  std::remove(out.c_str());
  return cache[only_template] = std::move(records);
}

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDataDir))
    if (e.path().extension() == ".jinja") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Tally {
  int outputs = 0;
  int errors = 0;
};

// Renders one record and compares it with what Python produced.
void check_record(const tf::jinja::Template& tmpl, const ordered_json& record, Tally& tally) {
  SCOPED_TRACE(record["template"].get<std::string>() + " / " + record.value("conversation", std::string()));
  tf::jinja::RenderOptions options;
  options.now = fixed_now();
  auto rendered = tmpl.render(record["context"], options);
  if (record.contains("error")) {
    ++tally.errors;
    EXPECT_FALSE(rendered.has_value()) << "Python raised " << record["error"] << " but we rendered:\n"
                                       << *rendered;
    return;
  }
  ++tally.outputs;
  ASSERT_TRUE(rendered.has_value()) << rendered.status().to_string();
  EXPECT_EQ(*rendered, record["output"].get<std::string>());
}

class ChatTemplateParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateParity, MatchesPythonJinja2) {
  const std::string name = GetParam();
  auto tmpl = tf::jinja::Template::parse(read_file(kDataDir + "/" + name), {.name = name});
  ASSERT_TRUE(tmpl.has_value()) << tmpl.status().to_string();
  Tally tally;
  for (const auto& record : reference(name)) {
    if (record["template"] != name) continue;
    check_record(*tmpl, record, tally);
  }
  // conversations.json holds at least 30 conversations, each rendered or failing in Python.
  EXPECT_GE(tally.outputs + tally.errors, 30);
  EXPECT_GT(tally.outputs, 10) << "too few conversations render with this template to mean anything";
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateParity, ::testing::ValuesIn(template_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n;
                           for (char c : info.param)
                             n.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
                           return n;
                         });

TEST(JinjaSnippetParity, EveryFeatureSnippetMatchesPythonJinja2) {
  Tally tally;
  for (const auto& record : reference("")) {
    SCOPED_TRACE(record["template"].get<std::string>());
    auto tmpl = tf::jinja::Template::parse(record["source"].get<std::string>());
    if (!tmpl.has_value()) {
      ++tally.errors;
      EXPECT_TRUE(record.contains("error")) << "we failed to parse: " << tmpl.status().to_string();
      continue;
    }
    check_record(*tmpl, record, tally);
  }
  EXPECT_GT(tally.outputs, 80);
  EXPECT_GT(tally.errors, 10);
}

}  // namespace
