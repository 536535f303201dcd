#include "check/haystack.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace tf::check {
namespace {

// splitmix64: a well-mixed stream from any seed.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  template <size_t N>
  const char* pick(const std::array<const char*, N>& words) {
    return words[next() % N];
  }
};

constexpr std::array<const char*, 12> kSubjects = {
    "The old harbour",   "The river market",   "A quiet village", "The northern railway",
    "The city library",  "A mountain inn",     "The salt works",  "The east quarter",
    "A border garrison", "The weavers' guild", "The summer fair", "A hill monastery"};
constexpr std::array<const char*, 12> kSyllables = {"tol", "va",  "ne", "mer", "ris", "do",
                                                    "an",  "kel", "su", "bra", "li",  "or"};
constexpr std::array<const char*, 8> kVerbs = {"records", "keeps",  "lists", "counts",
                                               "reports", "stores", "sells", "repairs"};
constexpr std::array<const char*, 12> kObjects = {"boats",  "visitors", "lanterns", "books",
                                                  "carts",  "bells",    "barrels",  "maps",
                                                  "horses", "blankets", "clocks",   "ledgers"};
constexpr std::array<const char*, 10> kTimes = {
    "each spring",      "in the winter",       "on market days", "after the harvest", "every evening",
    "before the rains", "during the festival", "in a good year", "most mornings",     "when the roads open"};

std::string place(Rng& rng) {
  std::string name;
  const int parts = 2 + static_cast<int>(rng.next() % 2);
  for (int i = 0; i < parts; ++i) name += rng.pick(kSyllables);
  name[0] = static_cast<char>(name[0] - 'a' + 'A');
  return name;
}

}  // namespace

std::string filler_sentences(uint64_t seed, int count) {
  Rng rng{seed * 0x2545F4914F6CDD1Dull + 1};
  std::string out;
  for (int i = 0; i < count; ++i) {
    out += rng.pick(kSubjects);
    out += " of " + place(rng) + " ";
    out += rng.pick(kVerbs);
    out += " " + std::to_string(10 + rng.next() % 990) + " ";
    out += rng.pick(kObjects);
    out += " ";
    out += rng.pick(kTimes);
    out += ". ";
  }
  return out;
}

Needle make_needle(uint64_t seed) {
  Rng rng{seed ^ 0xC0DEC0DEull};
  Needle n;
  std::string spoken;
  for (int i = 0; i < 5; ++i) {
    const char d = static_cast<char>('1' + rng.next() % 9);
    n.code += d;
    spoken += (i ? "-" : "") + std::string(1, d);
  }
  n.sentence = "The secret code for the blue lighthouse is " + spoken + ". ";
  n.question = "What is the secret code for the blue lighthouse? Reply with the code only.";
  return n;
}

std::string haystack_with_needle(uint64_t seed, int sentences, double depth, const Needle& needle) {
  const int before = static_cast<int>(std::lround(std::clamp(depth, 0.0, 1.0) * sentences));
  // Two streams so moving the needle does not change the text around it.
  return filler_sentences(seed, before) + needle.sentence + filler_sentences(seed + 7919, sentences - before);
}

bool reply_has_code(const std::string& reply, const std::string& code) {
  std::string digits;
  for (char c : reply)
    if (c >= '0' && c <= '9') digits += c;
  return !code.empty() && digits.find(code) != std::string::npos;
}

}  // namespace tf::check
