// The prompt store's state and block files (see prompt_state_files.h).
#include "engine/prompt_state_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace tf::engine {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFormat = "tensorfold-prompt-state/2";
constexpr const char* kBlockFormat = "tensorfold-prompt-block/1";
constexpr const char* kPartSuffix = ".part";  // a write not yet complete
constexpr const char* kTokens = "prompt.tokens";

uint32_t crc_of(uint32_t crc, const void* data, size_t bytes) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

// Flushes a file (or a folder's entries) to the disk.
void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string field(const SafetensorsFile& file, const char* key) {
  auto it = file.metadata().find(key);
  return it == file.metadata().end() ? std::string() : it->second;
}

Expected<int64_t> int_field(const SafetensorsFile& file, const char* key) {
  const std::string s = field(file, key);
  long long v = 0;
  int used = 0;
  if (std::sscanf(s.c_str(), "%lld%n", &v, &used) != 1 || used != static_cast<int>(s.size()) || v < 0)
    return invalid_argument(file.path() + ": " + key + " is '" + s + "'");
  return static_cast<int64_t>(v);
}

Status check_kind(const SafetensorsFile& file, const char* format, const std::string& fingerprint) {
  if (field(file, "format") != format)
    return invalid_argument(file.path() + ": not a " + format + " file (" + field(file, "format") + ")");
  if (field(file, "fingerprint") != fingerprint)
    return invalid_argument(file.path() + ": made by another build or model");
  return Status::ok();
}

// The CRC-32 of a file's data section (its tensors in the order they lie there) against
// its metadata's.
Status check_crc(const SafetensorsFile& file) {
  TF_ASSIGN_OR_RETURN(const int64_t expected, int_field(file, "crc32"));
  std::vector<const TensorEntry*> order;
  for (const TensorEntry& e : file.entries()) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->data_begin < b->data_begin; });
  uint32_t crc = crc_of(0, nullptr, 0);
  for (const TensorEntry* e : order) {
    TF_ASSIGN_OR_RETURN(Tensor t, file.tensor(e->name));
    crc = crc_of(crc, t.raw(), t.nbytes());
  }
  if (crc != static_cast<uint32_t>(expected)) return invalid_argument(file.path() + ": CRC mismatch");
  return Status::ok();
}

// "name=tokens;..." and back: a state file's tensors along the sequence.
std::string along_field(const std::map<std::string, int64_t>& tokens_per_row) {
  std::string s;
  for (const auto& [name, n] : tokens_per_row) s += (s.empty() ? "" : ";") + name + "=" + std::to_string(n);
  return s;
}

Expected<std::map<std::string, int64_t>> parse_along(const SafetensorsFile& file) {
  std::map<std::string, int64_t> out;
  const std::string s = field(file, "along");
  size_t at = 0;
  while (at < s.size()) {
    const size_t end = std::min(s.find(';', at), s.size());
    const std::string item = s.substr(at, end - at);
    const size_t eq = item.find('=');
    long long n = 0;
    if (eq == std::string::npos || eq == 0 || std::sscanf(item.c_str() + eq + 1, "%lld", &n) != 1 || n <= 0)
      return invalid_argument(file.path() + ": along is '" + s + "'");
    out[item.substr(0, eq)] = n;
    at = end + 1;
  }
  return out;
}

Expected<Tensor> open_rows(const SafetensorsFile& file, const std::string& name, int64_t rows) {
  TF_ASSIGN_OR_RETURN(Tensor t, file.tensor(name));
  if (t.dim() < 1 || t.size(0) != rows)
    return invalid_argument(file.path() + ": " + name + " is " + t.describe() + ", not " +
                            std::to_string(rows) + " rows");
  return t;
}

}  // namespace

std::vector<std::string> block_digests(std::span<const int32_t> tokens, int64_t block_tokens) {
  std::vector<std::string> out;
  if (block_tokens <= 0) return out;
  const auto blocks = static_cast<int64_t>(tokens.size()) / block_tokens;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> done(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  for (int64_t k = 0; k < blocks; ++k) {
    // The ranks of one world and the runs of one build share a byte order.
    EVP_DigestUpdate(ctx.get(), tokens.data() + k * block_tokens,
                     static_cast<size_t>(block_tokens) * sizeof(int32_t));
    EVP_MD_CTX_copy_ex(done.get(), ctx.get());
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(done.get(), md, &n);
    std::string hex(2 * n, '0');
    for (unsigned int i = 0; i < n; ++i) std::snprintf(&hex[2 * i], 3, "%02x", md[i]);
    out.push_back(std::move(hex));
  }
  return out;
}

std::string block_file_name(const std::string& digest) { return digest.substr(0, 32) + ".tfblock"; }

std::vector<std::pair<std::string, Tensor>> rows_along(const SequenceSnapshot& snap, int64_t first,
                                                       int64_t count) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : snap.tensors) {
    auto along = snap.tokens_per_row.find(name);
    if (along == snap.tokens_per_row.end()) continue;
    const int64_t per_row = along->second;
    const int64_t begin = (first - snap.from) / per_row, end = (first + count - snap.from) / per_row;
    if (end > begin) out.emplace_back(name, t.slice(0, begin, end));
  }
  return out;
}

Status write_store_file(const std::string& path, const char* format, const std::string& fingerprint,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        std::map<std::string, std::string> meta) {
  uint32_t crc = crc_of(0, nullptr, 0);
  for (const auto& [name, t] : tensors) crc = crc_of(crc, t.raw(), t.nbytes());
  meta["format"] = format;
  meta["fingerprint"] = fingerprint;
  meta["crc32"] = std::to_string(crc);
  const std::string part = path + kPartSuffix;
  std::error_code ec;
  if (Status s = write_safetensors(part, tensors, meta); !s.is_ok()) {
    fs::remove(part + ".tmp", ec);  // e.g. the disk is full: leave nothing behind
    fs::remove(part, ec);
    return s;
  }
  ::chmod(part.c_str(), 0600);
  sync_path(part);
  fs::rename(part, path, ec);
  if (ec) {
    fs::remove(part, ec);
    return internal_error(path + ": rename failed (" + ec.message() + ")");
  }
  sync_path(fs::path(path).parent_path().string());
  return Status::ok();
}

Status write_block_file(const std::string& path, const std::string& fingerprint, const std::string& digest,
                        const SequenceSnapshot& snap, int64_t first, int64_t tokens) {
  if (first < snap.from) return internal_error("a block before the snapshot's first row");
  return write_store_file(
      path, kBlockFormat, fingerprint, rows_along(snap, first, tokens),
      {{"prefix_sha256", digest}, {"first", std::to_string(first)}, {"tokens", std::to_string(tokens)}});
}

Status write_state_file(const std::string& path, const std::string& fingerprint,
                        std::span<const int32_t> tokens, const SequenceSnapshot& snap, int64_t block_tokens) {
  const int64_t tail = snap.length / block_tokens * block_tokens;
  if (tail < snap.from) return internal_error("a state's rows after its last block are not in its snapshot");
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back(kTokens, Tensor::view_of(const_cast<int32_t*>(tokens.data()),
                                                {static_cast<int64_t>(tokens.size())}, DType::kI32));
  for (const auto& [name, t] : snap.tensors)
    if (!snap.tokens_per_row.count(name)) tensors.emplace_back(name, t);
  for (auto& rows : rows_along(snap, tail, snap.length - tail)) tensors.push_back(std::move(rows));
  return write_store_file(path, kStateFormat, fingerprint, tensors,
                          {{"length", std::to_string(snap.length)},
                           {"mtp_length", std::to_string(snap.mtp_length)},
                           {"block_tokens", std::to_string(block_tokens)},
                           {"along", along_field(snap.tokens_per_row)}});
}

Expected<StateFileInfo> state_file_info(const SafetensorsFile& file, const std::string& fingerprint) {
  TF_RETURN_IF_ERROR(check_kind(file, kStateFormat, fingerprint));
  StateFileInfo info;
  TF_ASSIGN_OR_RETURN(Tensor t, file.tensor(kTokens));
  if (t.dtype() != DType::kI32 || t.dim() != 1 || t.numel() == 0)
    return invalid_argument(file.path() + ": " + kTokens + " is " + t.describe());
  info.tokens.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  TF_ASSIGN_OR_RETURN(info.length, int_field(file, "length"));
  TF_ASSIGN_OR_RETURN(info.mtp_length, int_field(file, "mtp_length"));
  TF_ASSIGN_OR_RETURN(info.block_tokens, int_field(file, "block_tokens"));
  TF_ASSIGN_OR_RETURN(info.tokens_per_row, parse_along(file));
  if (info.length != static_cast<int64_t>(info.tokens.size()))
    return invalid_argument(file.path() + ": length " + std::to_string(info.length) + " for " +
                            std::to_string(info.tokens.size()) + " tokens");
  if (info.block_tokens <= 0) return invalid_argument(file.path() + ": block_tokens is 0");
  for (const auto& [name, per_row] : info.tokens_per_row)
    if (info.block_tokens % per_row != 0 || info.length % per_row != 0)
      return invalid_argument(file.path() + ": " + name + "'s rows of " + std::to_string(per_row) +
                              " tokens do not divide its blocks and length");
  return info;
}

Expected<std::string> block_file_digest(const SafetensorsFile& file, const std::string& fingerprint) {
  TF_RETURN_IF_ERROR(check_kind(file, kBlockFormat, fingerprint));
  std::string digest = field(file, "prefix_sha256");
  if (digest.size() != 64) return invalid_argument(file.path() + ": prefix_sha256 is '" + digest + "'");
  return digest;
}

Expected<StoredState> read_stored_state(const std::string& path, std::span<const int32_t> prompt,
                                        const std::string& fingerprint, int64_t block_tokens,
                                        const std::function<std::string(const std::string&)>& block_path,
                                        StateReadFault& fault) {
  StoredState st;
  if (!fs::exists(path)) fault.missing_file = true;
  TF_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
  TF_ASSIGN_OR_RETURN(StateFileInfo info, state_file_info(*file, fingerprint));
  if (info.tokens.size() > prompt.size() ||
      !std::equal(info.tokens.begin(), info.tokens.end(), prompt.begin()))
    return invalid_argument(path + ": its tokens are not the prompt's");
  if (info.block_tokens != block_tokens)
    return invalid_argument(path + ": blocks of " + std::to_string(info.block_tokens) + " tokens, not " +
                            std::to_string(block_tokens));
  TF_RETURN_IF_ERROR(check_crc(*file));
  st.length = info.length;
  st.mtp_length = info.mtp_length;
  for (const TensorEntry& e : file->entries()) {
    if (e.name == kTokens || info.tokens_per_row.count(e.name)) continue;
    TF_ASSIGN_OR_RETURN(Tensor t, file->tensor(e.name));
    st.tensors[e.name] = {std::move(t)};
  }
  // The rows along the sequence: each block's, then the state file's own after them.
  const std::vector<std::string> digests = block_digests(info.tokens, block_tokens);
  for (const std::string& digest : digests) {
    const std::string bpath = block_path(digest);
    auto block = SafetensorsFile::open(bpath);
    if (!block) {
      if (fs::exists(bpath))
        fault.bad_block = digest;
      else
        fault.missing_file = true;
      return block.status();
    }
    Expected<std::string> says = block_file_digest(**block, fingerprint);
    Status ok = !says             ? says.status()
                : *says != digest ? invalid_argument(bpath + ": holds another prefix's rows")
                                  : check_crc(**block);
    for (auto it = info.tokens_per_row.begin(); ok.is_ok() && it != info.tokens_per_row.end(); ++it) {
      Expected<Tensor> rows = open_rows(**block, it->first, block_tokens / it->second);
      if (rows)
        st.tensors[it->first].push_back(std::move(*rows));
      else
        ok = rows.status();
    }
    if (!ok.is_ok()) {
      fault.bad_block = digest;
      return ok;
    }
  }
  const auto tail = info.length - static_cast<int64_t>(digests.size()) * block_tokens;
  for (const auto& [name, per_row] : info.tokens_per_row) {
    if (tail == 0) break;
    TF_ASSIGN_OR_RETURN(Tensor rows, open_rows(*file, name, tail / per_row));
    st.tensors[name].push_back(std::move(rows));
  }
  return st;
}

}  // namespace tf::engine
