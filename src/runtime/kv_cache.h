// The KV cache: fixed blocks of positions shared by all lanes, mapped per lane by a block table.
// Lanes of any length share the pool without fragmentation; a lane's logical position p lives
// at physical slot block_table[p / block_size] * block_size + p % block_size.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "runtime/batch.h"
#include "runtime/kv_storage.h"

namespace tf {

constexpr int64_t kKvBlockSize = 16;
inline int64_t kv_blocks_for(int64_t n_positions) {
  return (n_positions + kKvBlockSize - 1) / kKvBlockSize;
}

class KvCache {
 public:
  // n_blocks blocks over `storage`, which holds n_blocks * block_size slots (a backend makes it:
  // make_kv_cache in models/model.h).
  KvCache(std::unique_ptr<KvStorage> storage, int64_t n_blocks, int64_t block_size = kKvBlockSize);

  // The storage as the backend's own type; a cache made for another device is an error.
  template <class Storage>
  Storage& storage_as() {
    auto* storage = dynamic_cast<Storage*>(storage_.get());
    if (!storage) fail_internal("the KV cache's storage is not on the model's device (make it with the model)");
    return *storage;
  }
  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t n_free_blocks() const { return int64_t(free_blocks_.size()); }
  int64_t blocks_for(int64_t n_positions) const { return (n_positions + block_size_ - 1) / block_size_; }

  // A new lane with no positions; lanes are reused after lane_close.
  int32_t lane_open();
  void lane_close(int32_t lane);
  // Ensures positions [0, n_positions) have slots; false (and no change) when blocks run out.
  bool lane_reserve(int32_t lane, int64_t n_positions);
  // Releases whole blocks past n_positions.
  void lane_truncate(int32_t lane, int64_t n_positions);
  int64_t lane_capacity(int32_t lane) const;
  int32_t slot(int32_t lane, int64_t pos) const;
  // Copies one slot's keys and values in every layer (see KvStorage::copy_slot).
  void copy_slot(int32_t from, int32_t to) { storage_->copy_slot(from, to); }

 private:
  std::unique_ptr<KvStorage> storage_;
  int64_t n_blocks_;
  int64_t block_size_;
  std::vector<int32_t> free_blocks_;
  std::vector<std::vector<int32_t>> block_tables_;  // per lane
  std::vector<bool> lane_open_;
};

// Every row's keys in logical order (see BatchRow): row r attends to
// slots[offsets[r] .. offsets[r] + n_keys[r]), the physical slot of each position 0..pos.
// Both backends' attention reads these lists, so a tree row's keys are resolved in one place.
struct KeySlots {
  std::vector<int32_t> slots;
  std::vector<int32_t> offsets;  // [n_rows]
  std::vector<int32_t> n_keys;   // [n_rows]
};
// Fails on a row whose parent is not the same lane's row at pos - 1 earlier in the batch.
void resolve_key_slots(const Batch& batch, const KvCache& kv, KeySlots& out);

}  // namespace tf
