// The prompt store's files (prompt_store.h): a state file per stored prompt, and block
// files holding the rows along the sequence (SequenceSnapshot::tokens_per_row: the latent
// pages, the indexers' pooled keys) of a prompt's leading tokens, a block per
// `block_tokens` tokens, shared by every stored prompt that starts with those tokens.
//
// A block is named by the SHA-256 of all the tokens up to its end (its rows depend on every
// token before them, and a fresh run's rows for the same tokens are the same bits, see
// engine_prompt_reuse.cc), so the next turn of a chat writes only the blocks its new tokens
// complete. A state file holds its prompt's tokens, the tensors that do not run along the
// sequence (KDA states, indexer rings, the MTP layer's cache) and the rows after its last
// whole block. Both are safetensors files with a format tag, the store's fingerprint and a
// CRC-32 of their data in the metadata; each is written to a temporary name, fsynced and
// renamed (a crash leaves the whole file or none), mode 0600.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/glm5/glm5_model.h"
#include "model/safetensors.h"

namespace tf::engine {

// SHA-256 (hex) of tokens[0, (k+1) * block_tokens) for each whole block k of `tokens`.
std::vector<std::string> block_digests(std::span<const int32_t> tokens, int64_t block_tokens);
// A block's file name for its digest.
std::string block_file_name(const std::string& digest);

// The rows of `snap`'s tensors along the sequence for tokens [first, first + count) (all
// after snap.from), as views of the snapshot's tensors.
std::vector<std::pair<std::string, Tensor>> rows_along(const SequenceSnapshot& snap, int64_t first,
                                                       int64_t count);

// Writes `tensors` with `meta` (plus the format tag, fingerprint and CRC-32) to `path`
// through a temporary name; nothing is left behind when it fails.
Status write_store_file(const std::string& path, const char* format, const std::string& fingerprint,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        std::map<std::string, std::string> meta);

// A block file of `tokens` tokens holding the rows of the prompt prefix `digest` names.
Status write_block_file(const std::string& path, const std::string& fingerprint, const std::string& digest,
                        const SequenceSnapshot& snap, int64_t first, int64_t tokens);
// A state file: the prompt's tokens, the snapshot's tensors that do not run along the
// sequence and the rows after its last whole block of `block_tokens`.
Status write_state_file(const std::string& path, const std::string& fingerprint,
                        std::span<const int32_t> tokens, const SequenceSnapshot& snap, int64_t block_tokens);

// What a state file says about itself (checked: format, fingerprint, lengths).
struct StateFileInfo {
  std::vector<int32_t> tokens;
  int64_t length = 0, mtp_length = 0, block_tokens = 0;
  std::map<std::string, int64_t> tokens_per_row;  // the tensors along the sequence
};
Expected<StateFileInfo> state_file_info(const SafetensorsFile& file, const std::string& fingerprint);
// The digest a block file says it holds (checked: format, fingerprint).
Expected<std::string> block_file_digest(const SafetensorsFile& file, const std::string& fingerprint);

// A stored state read back, for Glm5Model::restore: its tensors by name as views of the
// mapped files (each view keeps its file's mapping), the rows along the sequence in pieces:
// each block's, then the state file's own.
struct StoredState {
  int64_t length = 0, mtp_length = 0;
  SnapshotPieces tensors;
};

// Why reading a state failed, beyond its status: which block, if one was at fault.
struct StateReadFault {
  std::string bad_block;      // a block file that failed its checks (delete it)
  bool missing_file = false;  // a file was gone (deleted meanwhile: nothing is corrupt)
};

// Reads the state file at `path` and its blocks (`block_path` maps a digest to its file),
// checking each file's format, fingerprint, CRC and digest, and that the state's tokens
// start `prompt`.
Expected<StoredState> read_stored_state(const std::string& path, std::span<const int32_t> prompt,
                                        const std::string& fingerprint, int64_t block_tokens,
                                        const std::function<std::string(const std::string&)>& block_path,
                                        StateReadFault& fault);

}  // namespace tf::engine
