// See sse_parser.h.
#include "bench/sse_parser.h"

namespace tf::bench {

void SseParser::take_line(std::string_view line, std::vector<std::string>& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) {  // blank line: the event is complete
    if (has_data_) out.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.substr(0, 5) != "data:") return;  // event:, id:, retry:, comments
  std::string_view value = line.substr(5);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (data_.size() + value.size() > kMaxLine) {
    overflowed_ = true;
    return;
  }
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\n') continue;
    if (pending_.empty()) {
      take_line(bytes.substr(start, i - start), out);
    } else {
      pending_.append(bytes.substr(start, i - start));
      take_line(pending_, out);
      pending_.clear();
    }
    start = i + 1;
  }
  if (start < bytes.size()) {
    if (pending_.size() + (bytes.size() - start) > kMaxLine) {
      overflowed_ = true;
      pending_.clear();
    } else {
      pending_.append(bytes.substr(start));
    }
  }
  return out;
}

std::vector<std::string> SseParser::finish() {
  std::vector<std::string> out;
  if (!pending_.empty()) {
    take_line(pending_, out);
    pending_.clear();
  }
  if (has_data_) out.push_back(std::move(data_));
  data_.clear();
  has_data_ = false;
  return out;
}

}  // namespace tf::bench
