// Recurrent-state checkpoints of the prefix cache: a byte-bounded LRU map from block keys.
#include "runtime/recurrent_checkpoints.h"

namespace tf {

const std::vector<uint8_t>* RecurrentCheckpoints::find(const BlockKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  entries_.splice(entries_.end(), entries_, it->second);
  return &it->second->state;
}

bool RecurrentCheckpoints::put(const BlockKey& key, std::vector<uint8_t> state) {
  if (find(key)) return true;
  const int64_t size = int64_t(state.size());
  if (size > budget_bytes_) return false;
  while (bytes_ + size > budget_bytes_) {
    bytes_ -= int64_t(entries_.front().state.size());
    by_key_.erase(entries_.front().key);
    entries_.pop_front();
    ++n_evictions_;
  }
  entries_.push_back({key, std::move(state)});
  by_key_[key] = std::prev(entries_.end());
  bytes_ += size;
  return true;
}

void RecurrentCheckpoints::forget(const BlockKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  bytes_ -= int64_t(it->second->state.size());
  entries_.erase(it->second);
  by_key_.erase(it);
}

int64_t RecurrentCheckpoints::resumable_prefix(const std::vector<BlockKey>& keys, int64_t n_cached) const {
  for (int64_t n = n_cached; n > 0; --n)
    if (contains(keys[size_t(n - 1)])) return n;
  return 0;
}

}  // namespace tf
