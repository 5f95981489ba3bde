// The prefix cache's other half for recurrent models (Qwen3.5-class hybrids): a DeltaNet layer's
// state at position p depends on every token before p and cannot be rebuilt from K/V, so a lane can
// resume a cached prefix only at a block boundary whose state was saved. Checkpoints are keyed like
// the block that ends there (its BlockKey names the whole prefix, the model and the salt), kept in
// host memory under a byte budget, least recently used dropped first. A checkpoint whose blocks were
// evicted is never used (a lane adopts only up to the cached prefix) and ages out.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "runtime/kv_cache.h"

namespace tf {

struct RecurrentCheckpointStats {
  int64_t n_checkpoints = 0;
  int64_t bytes = 0;
  int64_t evictions = 0;
};

class RecurrentCheckpoints {
 public:
  // budget_bytes bounds what the checkpoints hold together; 0 keeps none.
  explicit RecurrentCheckpoints(int64_t budget_bytes) : budget_bytes_(budget_bytes) {}

  bool contains(const BlockKey& key) const { return by_key_.count(key) != 0; }
  // The state saved at the end of key's block, or nullptr; a hit is the most recently used.
  const std::vector<uint8_t>* find(const BlockKey& key);
  // Keeps `state` under key (replacing nothing: a key's state is the same whoever computed it),
  // dropping the least recently used until it fits. False when it alone exceeds the budget.
  bool put(const BlockKey& key, std::vector<uint8_t> state);
  void forget(const BlockKey& key);
  // The longest n <= n_cached such that keys[n - 1] has a checkpoint (0 when none has).
  int64_t resumable_prefix(const std::vector<BlockKey>& keys, int64_t n_cached) const;
  RecurrentCheckpointStats stats() const { return {int64_t(entries_.size()), bytes_, n_evictions_}; }

 private:
  struct Entry {
    BlockKey key;
    std::vector<uint8_t> state;
  };
  int64_t budget_bytes_;
  int64_t bytes_ = 0;
  int64_t n_evictions_ = 0;
  std::list<Entry> entries_;  // least recently used first
  std::unordered_map<BlockKey, std::list<Entry>::iterator, BlockKeyHash> by_key_;
};

}  // namespace tf
