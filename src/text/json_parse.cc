// See json_parse.h. A SAX handler builds the value the way nlohmann's DOM parser does,
// but finds repeated keys through a hash map per open object instead of a linear scan, and
// gathers an object's members apart until it closes: ordered_json's members are pairs with a
// const key, which a growing vector copies instead of moving, so every member added after a
// large one (a request's messages, a message's content) copied it again.
#include "text/json_parse.h"

#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tf::text {

namespace {

using Json = nlohmann::ordered_json;

class OrderedBuilder {
 public:
  explicit OrderedBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(Json::number_integer_t v) { return put(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return put(v); }
  bool number_float(Json::number_float_t v, const std::string&) { return put(v); }
  bool string(std::string& v) { return put(std::move(v)); }
  bool binary(Json::binary_t& v) { return put(std::move(v)); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    Frame& f = stack_.back();
    auto [it, fresh] = f.keys.try_emplace(k, f.members.size());
    if (fresh) f.members.emplace_back(std::move(k), nullptr);
    f.slot = &f.members[it->second].second;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  Json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    Json* value;
    std::unordered_map<std::string, size_t> keys;       // objects only: member name -> index
    std::vector<std::pair<std::string, Json>> members;  // objects only: moved into *value on close
    Json* slot = nullptr;                               // objects only: the value the last key names
  };

  // Where the next value goes: the root, the end of the open array, or the last key's slot.
  Json* place() {
    if (stack_.empty()) return &root_;
    Frame& f = stack_.back();
    if (!f.value->is_array()) return f.slot;
    auto& items = f.value->get_ref<Json::array_t&>();
    items.emplace_back();
    return &items.back();
  }

  template <typename V>
  bool put(V&& v) {
    *place() = Json(std::forward<V>(v));
    return true;
  }

  // Children are only appended to the innermost open container, so the pointers held by
  // outer frames stay valid.
  bool open(Json empty) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      error_ = "JSON nests deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    Json* p = place();
    *p = std::move(empty);
    stack_.push_back({p, {}, {}, nullptr});
    return true;
  }

  bool close() {
    Frame& f = stack_.back();
    if (f.value->is_object()) {
      // ordered_map is a vector of members: filled in place, the map has checked for repeats.
      auto& members = static_cast<Json::object_t::Container&>(f.value->get_ref<Json::object_t&>());
      members.reserve(f.members.size());
      for (auto& [k, v] : f.members) members.emplace_back(std::move(k), std::move(v));
    }
    stack_.pop_back();
    return true;
  }

  int max_depth_;
  Json root_;
  std::deque<Frame> stack_;  // frames stay in place: a vector's growth would copy their members
  std::string error_;
};

}  // namespace

Expected<nlohmann::ordered_json> parse_json(std::string_view text, int max_depth) {
  OrderedBuilder builder(max_depth);
  if (!Json::sax_parse(text.begin(), text.end(), &builder))
    return invalid_argument(builder.error().empty() ? std::string("invalid JSON") : builder.error());
  return std::move(builder.root());
}

}  // namespace tf::text
