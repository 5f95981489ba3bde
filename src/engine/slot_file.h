// The saved-slot file: a slot's sequence, K/V and any recurrent state (SlotSnapshot) with a header naming the model
// (its files' SHA-256), the K/V's storage form and the format version, closed by a SHA-256 of
// everything before it, so a file for another model, a truncated or a corrupt one is refused with a
// sentence saying which, before any of it reaches the cache.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace tf {

// What K/V depends on besides the tokens: the model's files, each named with its SHA-256.
struct ModelIdentity {
  std::string model;                                        // a name for messages
  std::vector<std::pair<std::string, std::string>> files;  // (file name, hex SHA-256), sorted
};

// 2: a recurrent model's state at the last block; 3: its states at several blocks, the prompt's length.
constexpr int kSlotFileVersion = 3;
constexpr int kOldestSlotFileVersion = 2;  // still read

// Writes atomically (a temporary file renamed over `path`); returns the bytes written. Throws
// tf::Error when the name is taken by something that is not a file, std::runtime_error when the
// disk fails (a fault of the machine's, not of the request).
int64_t write_slot_file(const std::string& path, const SlotSnapshot& snapshot, const ModelIdentity& model);
// Removes the temporary files write_slot_file left in `dir` when its process died before renaming
// them: regular files named F.tmp-XXXXXX (mkstemp's six letters and digits) where F matches the
// std::regex `slot_file_name`; nothing else. Returns how many it removed.
int64_t remove_stale_slot_temporaries(const std::string& dir, const std::string& slot_file_name);
// Reads and checks a file written by write_slot_file for `model`; throws tf::Error naming what is
// wrong (not a slot file, a version it does not read, another model, truncated, corrupt); std::runtime_error
// when an existing file cannot be read.
SlotSnapshot read_slot_file(const std::string& path, const ModelIdentity& model, int64_t* n_bytes = nullptr);

}  // namespace tf
