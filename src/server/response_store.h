// Stored /v1/responses results (`store`, OpenAI's default): what `previous_response_id`
// continues from and what GET / DELETE /v1/responses/{id} return. Bounded up front: at most
// kMaxResponses responses and kMaxBytes of their JSON text; the oldest go first, and a
// continuation of a forgotten response is a 404 the client can act on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace tf::server {

struct StoredResponse {
  nlohmann::ordered_json response;  // the response object as the client got it
  // The conversation so far as Responses input items: the input it continued from, its own
  // input, then its output items (what a continuation prepends to its input).
  nlohmann::ordered_json items;
};

class ResponseStore {
 public:
  static constexpr size_t kMaxResponses = 1024;
  static constexpr size_t kMaxBytes = size_t{256} << 20;

  explicit ResponseStore(size_t max_responses = kMaxResponses, size_t max_bytes = kMaxBytes)
      : max_responses_(max_responses), max_bytes_(max_bytes) {}

  // Keeps `stored` under `id` (replacing one of the same id); one larger than the whole
  // budget is not kept.
  void put(const std::string& id, StoredResponse stored);
  std::optional<StoredResponse> get(const std::string& id) const;
  bool erase(const std::string& id);
  size_t size() const;

 private:
  struct Entry {
    std::string id;
    StoredResponse stored;
    size_t bytes = 0;
  };
  void erase_locked(std::list<Entry>::iterator it);

  const size_t max_responses_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  size_t bytes_ = 0;
};

}  // namespace tf::server
