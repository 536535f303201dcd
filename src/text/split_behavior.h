// Cutting text at the matches of a regex, with the Hugging Face tokenizers semantics
// (SplitDelimiterBehavior): the text is cut into alternating match / non-match segments covering
// it entirely, `invert` swaps the two roles, and the behaviour decides what happens to the
// delimiters (matches): Removed drops them, Isolated keeps them alone, MergedWithPrevious /
// MergedWithNext glue each to its neighbour, Contiguous glues runs of adjacent delimiters
// together. The parts stream out one at a time (at most one part is held back, to be glued to the
// next), so a long text costs no list of segments.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "text/pre_tokenizer.h"
#include "text/regex.h"

namespace tf::text {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" (or camelCase).
Expected<SplitBehavior> parse_split_behavior(const std::string& name);

// Hands the non-empty parts of `text`, cut at the matches of `re` with `behavior`, to `sink` in
// order; the views point into `text`.
void split_by_matches(const Regex& re, SplitBehavior behavior, bool invert, std::string_view text,
                      PieceSink sink);

}  // namespace tf::text
