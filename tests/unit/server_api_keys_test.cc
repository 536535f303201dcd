// API keys: API_KEY's list, API_KEY_FILE's lines, their reload (SIGHUP) and the headers that
// carry a key, unit by unit and through the HTTP server.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/api_keys.h"
#include "server_test_util.h"

namespace tf::server {
namespace {

namespace fs = std::filesystem;
using testing::FakeEngine;
using testing::TestServer;

void write_file(const fs::path& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);  // as a key file should be
}

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("tf_api_keys_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

TEST(ApiKeySet, InlineKeysAreCommaSeparatedAndTrimmed) {
  auto set = ApiKeySet::parse(" alpha , beta,,gamma ", "", "f");
  ASSERT_TRUE(set) << set.status().to_string();
  EXPECT_EQ(set->size(), 3u);
  EXPECT_TRUE(set->accepts("alpha"));
  EXPECT_TRUE(set->accepts("beta"));
  EXPECT_TRUE(set->accepts("gamma"));
  EXPECT_FALSE(set->accepts(" alpha"));
  EXPECT_FALSE(set->accepts("alph"));
  EXPECT_FALSE(set->accepts("alphaa"));
  EXPECT_FALSE(set->accepts(""));
  EXPECT_FALSE(set->accepts("alpha,beta"));
}

TEST(ApiKeySet, FileLinesSkipCommentsBlanksAndCarriageReturns) {
  auto set = ApiKeySet::parse("", "# team keys\n\n  sk-one  \r\nsk-two\n#sk-revoked\nsk-three", "keys.txt");
  ASSERT_TRUE(set) << set.status().to_string();
  EXPECT_EQ(set->size(), 3u);
  EXPECT_TRUE(set->accepts("sk-one"));
  EXPECT_TRUE(set->accepts("sk-three"));
  EXPECT_FALSE(set->accepts("#sk-revoked"));
  EXPECT_FALSE(set->accepts("sk-revoked"));
}

TEST(ApiKeySet, BadKeysAreRefusedNamingTheLineNotTheKey) {
  auto set = ApiKeySet::parse("", "good\nhas space-secret\n", "keys.txt");
  ASSERT_FALSE(set);
  EXPECT_NE(set.status().message().find("keys.txt: line 2"), std::string::npos) << set.status().message();
  EXPECT_EQ(set.status().message().find("space-secret"), std::string::npos) << set.status().message();
  EXPECT_FALSE(ApiKeySet::parse("", "caf\xc3\xa9\n", "k"));
  EXPECT_FALSE(ApiKeySet::parse("", std::string(4097, 'k'), "k"));
  EXPECT_TRUE(ApiKeySet::parse("", std::string(4096, 'k'), "k"));
  auto inline_bad = ApiKeySet::parse("ok,bad\x01key", "", "k");
  ASSERT_FALSE(inline_bad);
  EXPECT_NE(inline_bad.status().message().find("API_KEY: key 2"), std::string::npos);
}

TEST(ApiKeySet, AnEmptySetAcceptsNothing) {
  auto set = ApiKeySet::parse("", "", "k");
  ASSERT_TRUE(set);
  EXPECT_TRUE(set->empty());
  EXPECT_FALSE(set->accepts(""));
  EXPECT_FALSE(set->accepts("anything"));
}

TEST(PresentedKey, BearerOfAnyCaseElseXApiKey) {
  EXPECT_EQ(presented_key("Bearer sk-1", ""), "sk-1");
  EXPECT_EQ(presented_key("bearer sk-1", ""), "sk-1");
  EXPECT_EQ(presented_key("BEARER   sk-1 ", ""), "sk-1");
  EXPECT_EQ(presented_key("", "sk-2"), "sk-2");
  EXPECT_EQ(presented_key("Basic dXNlcjpwYXNz", "sk-2"), "sk-2");
  EXPECT_EQ(presented_key("Bearer", ""), "");
  EXPECT_EQ(presented_key("Bearer@sk-1", ""), "");
  EXPECT_EQ(presented_key("", ""), "");
}

TEST(ApiKeys, NoKeysMeansNoAuthentication) {
  auto keys = ApiKeys::load("", "");
  ASSERT_TRUE(keys);
  EXPECT_FALSE((*keys)->required());
  EXPECT_TRUE((*keys)->accepts(""));
}

TEST(ApiKeys, AFileWithoutKeysOrMissingIsRefused) {
  const fs::path file = temp_file("empty.txt");
  write_file(file, "# nothing yet\n\n");
  auto keys = ApiKeys::load("", file.string());
  ASSERT_FALSE(keys);
  EXPECT_NE(keys.status().message().find("lists no key"), std::string::npos) << keys.status().message();
  auto missing = ApiKeys::load("", (file.parent_path() / "absent.txt").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("absent.txt"), std::string::npos) << missing.status().message();
}

TEST(ApiKeys, ReloadSwapsTheFilesKeysAndKeepsThemOnFailure) {
  const fs::path file = temp_file("keys.txt");
  write_file(file, "sk-old\n");
  auto loaded = ApiKeys::load("sk-inline", file.string());
  ASSERT_TRUE(loaded) << loaded.status().to_string();
  ApiKeys& keys = **loaded;
  EXPECT_TRUE(keys.required());
  EXPECT_TRUE(keys.accepts("sk-old"));
  EXPECT_TRUE(keys.accepts("sk-inline"));

  write_file(file, "sk-new-1\nsk-new-2\n");
  auto n = keys.reload();
  ASSERT_TRUE(n) << n.status().to_string();
  EXPECT_EQ(*n, 3u);  // the inline key stays
  EXPECT_FALSE(keys.accepts("sk-old"));
  EXPECT_TRUE(keys.accepts("sk-new-2"));
  EXPECT_TRUE(keys.accepts("sk-inline"));

  // A file emptied by mistake, or one with a bad line, does not open the server or lock it.
  write_file(file, "");
  EXPECT_FALSE(keys.reload());
  write_file(file, "sk-x\nbad key\n");
  EXPECT_FALSE(keys.reload());
  fs::remove(file);
  EXPECT_FALSE(keys.reload());
  EXPECT_TRUE(keys.accepts("sk-new-1"));
  EXPECT_FALSE(keys.accepts("sk-x"));
}

TEST(ServerApiKeys, KeysFromTheFileAndTheListAreEnforcedAndReloaded) {
  const fs::path file = temp_file("server_keys.txt");
  write_file(file, "sk-file-1\n");
  ServerOptions o;
  o.api_key = "sk-a,sk-b";
  o.api_key_file = file.string();
  TestServer ts(o);
  auto c = ts.client();
  const auto status_with = [&](const std::string& header, const std::string& value) {
    httplib::Headers h;
    if (!header.empty()) h.emplace(header, value);
    auto res = c.Get("/v1/models", h);
    return res ? res->status : -1;
  };
  EXPECT_EQ(status_with("", ""), 401);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-a"), 200);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-b"), 200);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-file-1"), 200);
  EXPECT_EQ(status_with("x-api-key", "sk-file-1"), 200);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-a,sk-b"), 401);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-file-2"), 401);

  write_file(file, "sk-file-2\n");
  auto n = ts.server->reload_api_keys();
  ASSERT_TRUE(n) << n.status().to_string();
  EXPECT_EQ(*n, 3u);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-file-1"), 401);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-file-2"), 200);
  EXPECT_EQ(status_with("Authorization", "Bearer sk-a"), 200);
  fs::remove(file);
}

TEST(ServerApiKeys, AnUnreadableKeyFileStopsTheServerBeforeItListens) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.api_key_file = (temp_file("x").parent_path() / "no_such_keys.txt").string();
  FakeEngine engine;
  HttpServer server(engine, o);
  Status s = server.bind();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no_such_keys.txt"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tf::server
