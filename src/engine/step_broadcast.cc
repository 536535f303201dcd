// Step commands over the communicator (see step_broadcast.h for the protocol).
#include "engine/step_broadcast.h"

#include <cstring>

#include <utility>

namespace tf::engine {
namespace {

constexpr int64_t kWireMagic = 0x31505453'46544654;  // "TFTFSTP1" read little-endian
constexpr int64_t kMaxPayloadBytes = int64_t{1} << 30;

enum class MessageKind : int64_t { kSetup = 1, kCommand = 2 };

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i32(int32_t v) {
    const auto u = static_cast<uint32_t>(v);
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  void f32(float v) {
    uint32_t u = 0;
    std::memcpy(&u, &v, 4);
    i32(static_cast<int32_t>(u));
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Every read checks the bytes left and names the field it was reading.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}

  Status u8(uint8_t& v, const char* field) {
    TF_RETURN_IF_ERROR(need(1, field));
    v = in_[pos_++];
    return Status::ok();
  }
  Status u64(uint64_t& v, const char* field) {
    TF_RETURN_IF_ERROR(need(8, field));
    v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{in_[pos_ + static_cast<size_t>(i)]} << (8 * i);
    pos_ += 8;
    return Status::ok();
  }
  Status i32(int32_t& v, const char* field) {
    TF_RETURN_IF_ERROR(need(4, field));
    uint32_t u = 0;
    for (int i = 0; i < 4; ++i) u |= uint32_t{in_[pos_ + static_cast<size_t>(i)]} << (8 * i);
    pos_ += 4;
    v = static_cast<int32_t>(u);
    return Status::ok();
  }
  Status f32(float& v, const char* field) {
    int32_t i = 0;
    TF_RETURN_IF_ERROR(i32(i, field));
    const auto u = static_cast<uint32_t>(i);
    std::memcpy(&v, &u, 4);
    return Status::ok();
  }
  // A count of items of at least `min_item_bytes` each: no more than the bytes left allow.
  Status count(uint64_t& n, size_t min_item_bytes, const char* field) {
    TF_RETURN_IF_ERROR(u64(n, field));
    if (n > (in_.size() - pos_) / min_item_bytes) {
      return invalid_argument(std::string("step command: ") + field + " " + std::to_string(n) +
                              " exceeds the " + std::to_string(in_.size() - pos_) + " bytes left");
    }
    return Status::ok();
  }
  Status finish() const {
    if (pos_ == in_.size()) return Status::ok();
    return invalid_argument("step command: " + std::to_string(in_.size() - pos_) + " trailing bytes");
  }

 private:
  Status need(size_t n, const char* field) const {
    if (in_.size() - pos_ >= n) return Status::ok();
    return invalid_argument(std::string("step command: truncated at ") + field + " (byte " +
                            std::to_string(pos_) + " of " + std::to_string(in_.size()) + ")");
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

void write_ids(Writer& w, const std::vector<uint64_t>& ids) {
  w.u64(ids.size());
  for (uint64_t id : ids) w.u64(id);
}

Status read_ids(Reader& r, std::vector<uint64_t>& ids, const char* field) {
  uint64_t n = 0;
  TF_RETURN_IF_ERROR(r.count(n, 8, field));
  ids.resize(n);
  for (uint64_t& id : ids) TF_RETURN_IF_ERROR(r.u64(id, field));
  return Status::ok();
}

Status send_message(Communicator& comm, MessageKind kind, std::vector<uint8_t> payload) {
  if (comm.rank() != 0)
    return internal_error("step commands are sent by rank 0, not rank " + std::to_string(comm.rank()));
  int64_t header_values[4] = {kWireMagic, static_cast<int64_t>(kind), static_cast<int64_t>(payload.size()),
                              0};
  Tensor header = Tensor::view_of(header_values, {4}, DType::kI64);
  TF_RETURN_IF_ERROR(comm.broadcast(header, 0));
  if (payload.empty()) return Status::ok();
  Tensor body = Tensor::view_of(payload.data(), {static_cast<int64_t>(payload.size())}, DType::kU8);
  return comm.broadcast(body, 0);
}

Expected<std::vector<uint8_t>> receive_message(Communicator& comm, MessageKind expected) {
  int64_t header_values[4] = {0, 0, 0, 0};
  Tensor header = Tensor::view_of(header_values, {4}, DType::kI64);
  TF_RETURN_IF_ERROR(comm.broadcast(header, 0));
  if (header_values[0] != kWireMagic)
    return invalid_argument("step command header: bad magic (not a tensorfold rank 0?)");
  if (header_values[1] != static_cast<int64_t>(expected)) {
    return invalid_argument("step command header: message kind " + std::to_string(header_values[1]) +
                            ", expected " + std::to_string(static_cast<int64_t>(expected)));
  }
  const int64_t bytes = header_values[2];
  if (bytes < 0 || bytes > kMaxPayloadBytes) {
    return invalid_argument("step command header: payload of " + std::to_string(bytes) + " bytes");
  }
  std::vector<uint8_t> payload(static_cast<size_t>(bytes));
  if (bytes == 0) return payload;
  Tensor body = Tensor::view_of(payload.data(), {bytes}, DType::kU8);
  TF_RETURN_IF_ERROR(comm.broadcast(body, 0));
  return payload;
}

}  // namespace

Expected<bool> all_ranks_agree(Communicator& comm, bool mine) {
  float votes = mine ? 1.0f : 0.0f;
  Tensor t = Tensor::view_of(&votes, {1}, DType::kF32);
  TF_RETURN_IF_ERROR(comm.all_reduce_sum(t));
  return votes == static_cast<float>(comm.world_size());
}

const char* step_command_kind_name(StepCommandKind kind) {
  switch (kind) {
    case StepCommandKind::kStep:
      return "step";
    case StepCommandKind::kStop:
      return "stop";
  }
  return "unknown";
}

std::vector<uint8_t> encode_step_command(const StepCommand& command) {
  Writer w;
  w.u8(static_cast<uint8_t>(command.kind));
  write_ids(w, command.create);
  std::vector<uint64_t> forks;
  for (const auto& f : command.forks) forks.insert(forks.end(), f.begin(), f.end());
  write_ids(w, forks);
  write_ids(w, command.drop);
  std::vector<uint64_t> commits;
  for (const auto& c : command.commits) commits.insert(commits.end(), c.begin(), c.end());
  write_ids(w, commits);
  for (const auto* list : {&command.stores, &command.restores, &command.prefetches}) {
    w.u64(list->size());
    for (const StoredPrompt& s : *list) {
      w.u64(s.sequence);
      w.u64(s.tokens.size());
      for (int32_t t : s.tokens) w.i32(t);
    }
  }
  w.u64(command.entries.size());
  for (const StepCommandEntry& e : command.entries) {
    w.u64(e.sequence);
    const bool embeds = !e.embed_runs.empty();
    const bool drafts = e.mtp_drafts != 0;
    w.u8(static_cast<uint8_t>((e.all_logits ? 1 : 0) | (embeds ? 2 : 0) | (e.speculative ? 4 : 0) |
                              (e.mtp ? 8 : 0) | (drafts ? 16 : 0)));
    if (drafts) w.i32(e.mtp_drafts);
    w.u64(e.tokens.size());
    for (int32_t t : e.tokens) w.i32(t);
    if (!embeds) continue;
    w.u64(static_cast<uint64_t>(e.embed_width));
    w.u64(e.embed_runs.size());
    for (const auto& run : e.embed_runs)
      for (int64_t v : run) w.u64(static_cast<uint64_t>(v));
    w.u64(e.embeds.size());
    for (float v : e.embeds) w.f32(v);
  }
  return w.take();
}

Expected<StepCommand> decode_step_command(std::span<const uint8_t> payload) {
  Reader r(payload);
  StepCommand c;
  uint8_t kind = 0;
  TF_RETURN_IF_ERROR(r.u8(kind, "kind"));
  if (kind != static_cast<uint8_t>(StepCommandKind::kStep) &&
      kind != static_cast<uint8_t>(StepCommandKind::kStop)) {
    return invalid_argument("step command: unknown kind " + std::to_string(kind));
  }
  c.kind = static_cast<StepCommandKind>(kind);
  TF_RETURN_IF_ERROR(read_ids(r, c.create, "create count"));
  std::vector<uint64_t> forks;
  TF_RETURN_IF_ERROR(read_ids(r, forks, "fork count"));
  if (forks.size() % 2 != 0) return invalid_argument("step command: fork ids are not pairs");
  for (size_t i = 0; i < forks.size(); i += 2) c.forks.push_back({forks[i], forks[i + 1]});
  TF_RETURN_IF_ERROR(read_ids(r, c.drop, "drop count"));
  std::vector<uint64_t> commits;
  TF_RETURN_IF_ERROR(read_ids(r, commits, "commit count"));
  if (commits.size() % 2 != 0) return invalid_argument("step command: commits are not pairs");
  for (size_t i = 0; i < commits.size(); i += 2) {
    if (commits[i + 1] == 0 || commits[i + 1] > (uint64_t{1} << 20))
      return invalid_argument("step command: a commit keeps " + std::to_string(commits[i + 1]) + " rows");
    c.commits.push_back({commits[i], commits[i + 1]});
  }
  for (auto [list, field] :
       {std::pair{&c.stores, "store"}, {&c.restores, "restore"}, {&c.prefetches, "prefetch"}}) {
    uint64_t n = 0;
    TF_RETURN_IF_ERROR(r.count(n, 16, field));  // id + token count
    list->resize(n);
    for (StoredPrompt& s : *list) {
      TF_RETURN_IF_ERROR(r.u64(s.sequence, field));
      uint64_t tokens = 0;
      TF_RETURN_IF_ERROR(r.count(tokens, 4, field));
      if (tokens == 0) return invalid_argument(std::string("step command: a ") + field + " without tokens");
      s.tokens.resize(tokens);
      for (int32_t& t : s.tokens) TF_RETURN_IF_ERROR(r.i32(t, field));
    }
  }
  uint64_t entries = 0;
  TF_RETURN_IF_ERROR(r.count(entries, 17, "entry count"));  // id + flags + token count
  c.entries.resize(entries);
  for (StepCommandEntry& e : c.entries) {
    TF_RETURN_IF_ERROR(r.u64(e.sequence, "entry sequence"));
    uint8_t flags = 0;
    TF_RETURN_IF_ERROR(r.u8(flags, "entry flags"));
    if (flags > 31) return invalid_argument("step command: entry flags " + std::to_string(flags));
    e.all_logits = (flags & 1) != 0;
    e.speculative = (flags & 4) != 0;
    e.mtp = (flags & 8) != 0;
    if ((flags & 16) != 0) {
      TF_RETURN_IF_ERROR(r.i32(e.mtp_drafts, "entry MTP drafts"));
      if (e.mtp_drafts < 1 || e.mtp_drafts > 63)
        return invalid_argument("step command: an entry asks for " + std::to_string(e.mtp_drafts) + " MTP drafts");
    }
    uint64_t tokens = 0;
    TF_RETURN_IF_ERROR(r.count(tokens, 4, "entry token count"));
    e.tokens.resize(tokens);
    for (int32_t& t : e.tokens) TF_RETURN_IF_ERROR(r.i32(t, "entry token"));
    if ((flags & 2) == 0) continue;
    uint64_t width = 0, runs = 0, floats = 0;
    TF_RETURN_IF_ERROR(r.u64(width, "entry embedding width"));
    if (width == 0 || width > (uint64_t{1} << 20))
      return invalid_argument("step command: entry embedding width " + std::to_string(width));
    e.embed_width = static_cast<int64_t>(width);
    TF_RETURN_IF_ERROR(r.count(runs, 24, "entry embedding run count"));
    e.embed_runs.resize(runs);
    for (auto& run : e.embed_runs)
      for (int64_t& v : run) {
        uint64_t u = 0;
        TF_RETURN_IF_ERROR(r.u64(u, "entry embedding run"));
        if (u > tokens * width) return invalid_argument("step command: entry embedding run field " + std::to_string(u));
        v = static_cast<int64_t>(u);
      }
    TF_RETURN_IF_ERROR(r.count(floats, 4, "entry embedding count"));
    if (floats % width != 0)
      return invalid_argument("step command: " + std::to_string(floats) + " embedding values are not rows of " +
                              std::to_string(width));
    e.embeds.resize(floats);
    for (float& v : e.embeds) TF_RETURN_IF_ERROR(r.f32(v, "entry embedding"));
  }
  if (c.kind == StepCommandKind::kStop &&
      (!c.create.empty() || !c.forks.empty() || !c.drop.empty() || !c.commits.empty() || !c.entries.empty() ||
       !c.stores.empty() || !c.restores.empty() || !c.prefetches.empty())) {
    return invalid_argument("step command: a stop command carries sequences");
  }
  TF_RETURN_IF_ERROR(r.finish());
  return c;
}

Status send_step_command(Communicator& comm, const StepCommand& command) {
  return send_message(comm, MessageKind::kCommand, encode_step_command(command));
}

Expected<StepCommand> receive_step_command(Communicator& comm) {
  TF_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, receive_message(comm, MessageKind::kCommand));
  return decode_step_command(payload);
}

Status send_model_setup(Communicator& comm, const TpModelSetup& setup) {
  Writer w;
  w.u64(static_cast<uint64_t>(setup.page_size));
  w.u64(static_cast<uint64_t>(setup.num_pages));
  w.u8(static_cast<uint8_t>(setup.latent_dtype));
  w.u8(static_cast<uint8_t>(setup.weight_dtype));
  w.u8(setup.dense_quant);
  w.u8(setup.head_quant);
  w.u8(setup.draft_head_quant);
  return send_message(comm, MessageKind::kSetup, w.take());
}

Expected<TpModelSetup> receive_model_setup(Communicator& comm) {
  TF_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, receive_message(comm, MessageKind::kSetup));
  Reader r(payload);
  uint64_t page_size = 0, num_pages = 0;
  uint8_t dtype = 0, weights = 0, quant = 0, head = 0, draft_head = 0;
  TF_RETURN_IF_ERROR(r.u64(page_size, "setup page size"));
  TF_RETURN_IF_ERROR(r.u64(num_pages, "setup page count"));
  TF_RETURN_IF_ERROR(r.u8(dtype, "setup latent dtype"));
  TF_RETURN_IF_ERROR(r.u8(weights, "setup weight dtype"));
  TF_RETURN_IF_ERROR(r.u8(quant, "setup dense quantization"));
  TF_RETURN_IF_ERROR(r.u8(head, "setup lm_head quantization"));
  TF_RETURN_IF_ERROR(r.u8(draft_head, "setup MTP draft head quantization"));
  if (quant > 2) return invalid_argument("model setup: dense quantization " + std::to_string(quant) + " is unknown");
  if (head > 2) return invalid_argument("model setup: lm_head quantization " + std::to_string(head) + " is unknown");
  if (draft_head > 2)
    return invalid_argument("model setup: MTP draft head quantization " + std::to_string(draft_head) + " is unknown");
  TF_RETURN_IF_ERROR(r.finish());
  const auto wt = static_cast<DType>(weights);
  if (wt != DType::kF32 && wt != DType::kBF16) {
    return invalid_argument("model setup: weight dtype " + std::to_string(weights) + " is not f32 or bf16");
  }
  const auto dt = static_cast<DType>(dtype);
  if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF8E4M3) {
    return invalid_argument("model setup: latent dtype " + std::to_string(dtype) +
                            " is not f32, bf16 or f8_e4m3");
  }
  constexpr uint64_t kMaxCount = uint64_t{1} << 40;
  if (page_size == 0 || page_size > kMaxCount || num_pages == 0 || num_pages > kMaxCount) {
    return invalid_argument("model setup: page size " + std::to_string(page_size) + ", pages " +
                            std::to_string(num_pages));
  }
  return TpModelSetup{static_cast<int64_t>(page_size), static_cast<int64_t>(num_pages), dt, wt, quant, head, draft_head};
}

Status StepBroadcaster::send_step(std::vector<StepCommandEntry> entries) {
  if (stopped_) return internal_error("step broadcast after the stop command");
  StepCommand command = std::exchange(pending_, StepCommand{});
  command.entries = std::move(entries);
  return send_step_command(comm_, command);
}

Status StepBroadcaster::send_stop() {
  if (stopped_) return Status::ok();
  stopped_ = true;
  StepCommand stop;
  stop.kind = StepCommandKind::kStop;
  return send_step_command(comm_, stop);
}

}  // namespace tf::engine
