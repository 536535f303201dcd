// Stop strings on split text (random splits against a whole-text reference),
// UTF-8 safety, and the token-level stop rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "sampling/stop_conditions.h"
#include "sampling/stop_string_matcher.h"

namespace tf {
namespace {

bool complete_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

struct Outcome {
  std::string text;
  bool stopped = false;
  int32_t index = -1;
};

// Feeds `text` cut at `cuts` (sorted byte offsets); every emitted piece must
// be whole UTF-8 characters.
Outcome run(const std::vector<std::string>& stops, bool include, const std::string& text,
            const std::vector<size_t>& cuts) {
  StopStringMatcher m(stops, include);
  Outcome o;
  size_t prev = 0;
  std::vector<size_t> all = cuts;
  all.push_back(text.size());
  for (size_t c : all) {
    auto r = m.feed(std::string_view(text).substr(prev, c - prev));
    EXPECT_TRUE(complete_utf8(r.text)) << "piece ends inside a character";
    o.text += r.text;
    if (r.stopped) {
      o.stopped = true;
      o.index = r.stop_index;
    }
    prev = c;
  }
  if (!o.stopped) o.text += m.flush();
  return o;
}

// The reference: scan the whole text; the first stop string to complete wins
// (longest on a tie).
Outcome reference(const std::vector<std::string>& stops, bool include, const std::string& text) {
  for (size_t end = 1; end <= text.size(); ++end) {
    int32_t best = -1;
    for (size_t i = 0; i < stops.size(); ++i) {
      const auto& s = stops[i];
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 &&
          (best < 0 || s.size() > stops[static_cast<size_t>(best)].size())) {
        best = static_cast<int32_t>(i);
      }
    }
    if (best >= 0) {
      const size_t len = stops[static_cast<size_t>(best)].size();
      return {text.substr(0, include ? end : end - len), true, best};
    }
  }
  return {text, false, -1};
}

TEST(StopStringMatcher, CutsBeforeTheStopString) {
  auto o = run({"STOP"}, false, "hello STOP world", {3, 8, 12});
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "hello ");
  EXPECT_EQ(o.index, 0);
  o = run({"STOP"}, true, "hello STOP world", {7});
  EXPECT_EQ(o.text, "hello STOP");
}

TEST(StopStringMatcher, HoldsBackAPossibleStart) {
  StopStringMatcher m({"help"}, false);
  auto r = m.feed("say hel");
  EXPECT_EQ(r.text, "say ");
  EXPECT_EQ(m.held_bytes(), 3u);
  r = m.feed("lo");
  EXPECT_EQ(r.text, "hello");
  EXPECT_FALSE(r.stopped);
  r = m.feed("he");
  EXPECT_EQ(r.text, "");
  r = m.feed("lp me");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  r = m.feed("more");  // ignored after the stop
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringMatcher, FirstToCompleteWinsWhateverTheSplit) {
  // "bc" completes before "abcd" does: cut at "a" whether "abcd" arrives whole or not.
  EXPECT_EQ(run({"abcd", "bc"}, false, "xabcd", {}).text, "xa");
  EXPECT_EQ(run({"abcd", "bc"}, false, "xabcd", {3}).text, "xa");
  EXPECT_EQ(run({"abcd", "bc"}, false, "xabcd", {}).index, 1);
  // Same end: the longer one.
  EXPECT_EQ(run({"c", "abc"}, false, "zabc", {}).text, "z");
  EXPECT_EQ(run({"c", "abc"}, false, "zabc", {}).index, 1);
}

TEST(StopStringMatcher, MultiByteStopAndText) {
  const std::string text = "abc\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E";  // abc日本語
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    auto o = run({"\xE6\x97\xA5\xE6\x9C\xAC"}, false, text, {cut});
    EXPECT_EQ(o.text, "abc");
    EXPECT_TRUE(o.stopped);
  }
}

TEST(StopStringMatcher, NeverEmitsHalfACharacter) {
  const std::string text = "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xF0\x9F\x99\x82!";  // héllo wörld 日🙂!
  StopStringMatcher m({}, false);
  std::string out;
  for (char c : text) {
    auto r = m.feed(std::string(1, c));
    EXPECT_TRUE(complete_utf8(r.text));
    out += r.text;
  }
  out += m.flush();
  EXPECT_EQ(out, text);
}

TEST(StopStringMatcher, FlushReplacesAnIncompleteTail) {
  StopStringMatcher m({}, false);
  EXPECT_EQ(m.feed("a\xE6\x97").text, "a");
  EXPECT_EQ(m.flush(), "\xEF\xBF\xBD");
}

TEST(StopStringMatcher, IncompleteTail) {
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("ab"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xC3"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x99"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x99\x82"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\x80\x80\x80"), 0u);  // stray continuations: nothing to wait for
}

TEST(StopStringMatcher, RandomSplitsMatchTheWholeTextReference) {
  std::mt19937 rng(20261129);
  const std::vector<std::string> alphabet{"a", "b", "c", " ", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x99\x82"};
  auto random_string = [&](size_t chars) {
    std::string s;
    for (size_t i = 0; i < chars; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  int stopped = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    const size_t n_stops = 1 + rng() % 3;
    for (size_t i = 0; i < n_stops; ++i) stops.push_back(random_string(1 + rng() % 4));
    const std::string text = random_string(rng() % 40);
    const bool include = (rng() % 2) == 0;
    std::vector<size_t> cuts;
    for (size_t i = 0, k = rng() % 8; i < k && !text.empty(); ++i) cuts.push_back(rng() % (text.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    const Outcome want = reference(stops, include, text);
    const Outcome got = run(stops, include, text, cuts);
    ASSERT_EQ(got.text, want.text) << "trial " << trial;
    ASSERT_EQ(got.stopped, want.stopped) << "trial " << trial;
    ASSERT_EQ(got.index, want.index) << "trial " << trial;
    stopped += want.stopped;
  }
  EXPECT_GT(stopped, 300);  // the trials exercise both outcomes
  EXPECT_LT(stopped, 2700);
}

TEST(StopConditions, StopIdsEosAndLength) {
  SamplingParams p;
  p.max_tokens = 5;
  p.stop_token_ids = {7};
  const std::vector<int32_t> eos{2};
  StopConditions c(p, eos);
  EXPECT_EQ(c.after_token(3, 1), FinishReason::kNone);
  EXPECT_EQ(c.after_token(7, 2), FinishReason::kStop);
  EXPECT_EQ(c.after_token(2, 2), FinishReason::kStop);
  EXPECT_EQ(c.after_token(3, 5), FinishReason::kLength);
  EXPECT_EQ(c.after_token(2, 5), FinishReason::kStop);  // a stop on the last token is a stop
  EXPECT_TRUE(c.banned(0).empty());
  EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
}

TEST(StopConditions, IgnoreEosAndMinTokens) {
  SamplingParams p;
  p.max_tokens = 10;
  p.min_tokens = 3;
  p.ignore_eos = true;
  p.stop_token_ids = {7};
  const std::vector<int32_t> eos{2};
  StopConditions c(p, eos);
  EXPECT_FALSE(c.is_stop_token(2));
  EXPECT_EQ(c.after_token(2, 1), FinishReason::kNone);
  ASSERT_EQ(c.banned(0).size(), 1u);
  EXPECT_EQ(c.banned(2)[0], 7);
  EXPECT_TRUE(c.banned(3).empty());
  EXPECT_EQ(c.after_token(7, 3), FinishReason::kNone);  // sampled while banned: does not count
  EXPECT_EQ(c.after_token(7, 4), FinishReason::kStop);
}

}  // namespace
}  // namespace tf
