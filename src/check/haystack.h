// Filler text for the long-prompt checks, and the needle hidden in it.
//
// Design: plain sentences built from small word lists by a seeded generator ("The river
// market of Tolvane counts 412 lanterns after the harvest."), so the text reads as prose,
// never repeats a sentence within a haystack, carries no special tokens and holds no
// lighthouse codes of its own. The same seed gives the same text.
#pragma once

#include <cstdint>
#include <string>

namespace tf::check {

// `count` filler sentences, each followed by a space.
std::string filler_sentences(uint64_t seed, int count);

// The needle for a given seed: a five-digit code ("7-3-9-1-4") and the sentence that states it.
struct Needle {
  std::string code;      // digits only, e.g. "73914"
  std::string sentence;  // "The secret code for the blue lighthouse is 7-3-9-1-4. "
  std::string question;  // asks for the code
};
Needle make_needle(uint64_t seed);

// `sentences` filler sentences with the needle placed after round(depth x sentences) of them.
std::string haystack_with_needle(uint64_t seed, int sentences, double depth, const Needle& needle);

// True when the digits of `reply`, read in order with everything else dropped, contain the code.
bool reply_has_code(const std::string& reply, const std::string& code);

}  // namespace tf::check
