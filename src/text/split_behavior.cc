// Each behaviour is a left-to-right pass over the segments with at most one part held back: the
// rules of the Hugging Face implementation only ever glue a segment to the part just before it
// (MergedWithPrevious, Contiguous) or a delimiter to the segment just after it (MergedWithNext).
#include "text/split_behavior.h"

namespace tf::text {
namespace {

struct Segment {
  size_t begin, end;
  bool is_match;
};

// The match / non-match segments of `text`, left to right, each non-empty.
class Segments {
 public:
  Segments(const Regex& re, std::string_view text, bool invert)
      : matches_(re, text), text_(text), invert_(invert) {}

  // Sets `s` to the next segment and returns true, or returns false at the end.
  bool next(Segment& s) {
    if (has_pending_match_) {
      has_pending_match_ = false;
      s = pending_match_;
      return true;
    }
    size_t b, e;
    if (matches_.next(b, e)) {
      const Segment match{b, e, !invert_};
      if (b > prev_end_) {
        s = Segment{prev_end_, b, invert_};
        pending_match_ = match;
        has_pending_match_ = true;
      } else {
        s = match;
      }
      prev_end_ = e;
      return true;
    }
    if (prev_end_ < text_.size()) {
      s = Segment{prev_end_, text_.size(), invert_};
      prev_end_ = text_.size();
      return true;
    }
    return false;
  }

 private:
  RegexMatches matches_;
  std::string_view text_;
  bool invert_;
  size_t prev_end_ = 0;
  Segment pending_match_{0, 0, false};  // the match that follows the gap just returned
  bool has_pending_match_ = false;
};

}  // namespace

Expected<SplitBehavior> parse_split_behavior(const std::string& s) {
  if (s == "Removed" || s == "removed") return SplitBehavior::kRemoved;
  if (s == "Isolated" || s == "isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious" || s == "mergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext" || s == "mergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous" || s == "contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("pre_tokenizer Split: unknown behavior \"" + s + "\"");
}

void split_by_matches(const Regex& re, SplitBehavior behavior, bool invert, std::string_view text,
                      PieceSink sink) {
  Segments segments(re, text, invert);
  const auto emit = [&](size_t b, size_t e) {
    if (e > b) sink(text.substr(b, e - b));
  };
  // The part held back: it may still grow to the right (MergedWithPrevious, Contiguous), or it is a
  // delimiter waiting for the segment it glues to (MergedWithNext).
  Segment held{0, 0, false};
  bool holding = false;
  bool prev_match = false;
  for (Segment s; segments.next(s);) {
    switch (behavior) {
      case SplitBehavior::kRemoved:
        if (!s.is_match) emit(s.begin, s.end);
        break;
      case SplitBehavior::kIsolated:
        emit(s.begin, s.end);
        break;
      case SplitBehavior::kMergedWithPrevious:
      case SplitBehavior::kContiguous: {
        const bool glue = behavior == SplitBehavior::kMergedWithPrevious ? s.is_match && !prev_match
                                                                         : s.is_match == prev_match;
        if (glue && holding) {
          held.end = s.end;
        } else {
          if (holding) emit(held.begin, held.end);
          held = s;
          holding = true;
        }
        break;
      }
      case SplitBehavior::kMergedWithNext:
        // A delimiter followed by a non-delimiter starts that segment's part; any other delimiter
        // stands alone.
        if (holding) {
          holding = false;
          if (!s.is_match) {
            emit(held.begin, s.end);
            break;
          }
          emit(held.begin, held.end);
        }
        if (s.is_match) {
          held = s;
          holding = true;
        } else {
          emit(s.begin, s.end);
        }
        break;
    }
    prev_match = s.is_match;
  }
  if (holding) emit(held.begin, held.end);
}

}  // namespace tf::text
