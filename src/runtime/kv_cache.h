// The KV cache: fixed blocks of positions shared by all lanes, mapped per lane by a block table.
// Lanes of any length share the pool without fragmentation; a lane's logical position p lives
// at physical slot block_table[p / block_size] * block_size + p % block_size.
//
// It is also the prefix cache. A full block whose positions are all committed can be published
// under a key that names everything its K/V depends on (the tokens of every position up to its end,
// the model, the tenant's salt: BlockKey chains them); a later lane whose prompt has the same
// tokens adopts the block by reference instead of recomputing it. A row's K/V has the same bits in
// any batch, so an adopted block holds exactly what a cold prefill would write: resumed = fresh.
// Blocks nobody references stay cached until the pool runs short, then the least recently used
// go first; a block a live lane holds is never evicted.
#pragma once
#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "runtime/batch.h"
#include "runtime/kv_storage.h"

namespace tf {

constexpr int64_t kKvBlockSize = 16;
inline int64_t kv_blocks_for(int64_t n_positions) {
  return (n_positions + kKvBlockSize - 1) / kKvBlockSize;
}

// SHA-256 over (the previous block's key, this block's tokens): a chain, so a block's key names
// its whole prefix. The first block's parent is root_block_key(model and salt).
struct BlockKey {
  std::array<uint8_t, 32> digest{};
  bool operator==(const BlockKey& other) const { return digest == other.digest; }
};
struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const;
};
BlockKey root_block_key(std::string_view model_id, std::string_view salt);
BlockKey next_block_key(const BlockKey& parent, const int32_t* tokens, int64_t n_tokens);
// Keys of the full blocks among tokens[0, n_positions) (n_positions / block_size of them).
std::vector<BlockKey> block_keys(const BlockKey& root, const std::vector<int32_t>& tokens, int64_t n_positions,
                                 int64_t block_size);

// Counts for /metrics; blocks now, evictions since start.
struct KvPoolStats {
  int64_t n_blocks = 0;
  int64_t in_use = 0;   // held by a lane (shared blocks once)
  int64_t cached = 0;   // published and held by nobody: reusable until evicted
  int64_t free = 0;     // holding nothing
  int64_t evictions = 0;
};

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
  KvStorage& storage() { return *storage_; }
  const KvStorage& storage() const { return *storage_; }
  int64_t block_size() const { return block_size_; }
  int64_t n_blocks() const { return n_blocks_; }
  // Blocks a lane may still draw: free or cached, less what admitted lanes were promised.
  int64_t n_free_blocks() const;
  int64_t blocks_for(int64_t n_positions) const { return (n_positions + block_size_ - 1) / block_size_; }
  KvPoolStats stats() const;

  // A new lane with no positions; lanes are reused after lane_close.
  int32_t lane_open();
  // Releases the lane's blocks: published ones stay cached for reuse, the others are freed.
  void lane_close(int32_t lane);
  // Promises the lane blocks for positions [0, n_positions): later lane_reserve calls within it
  // cannot fail, whatever other lanes do. False (and no change) when the pool cannot promise it.
  bool lane_promise(int32_t lane, int64_t n_positions);
  // Ensures positions [0, n_positions) have slots; false (and no change) when blocks run out.
  bool lane_reserve(int32_t lane, int64_t n_positions);
  // Releases whole blocks past n_positions.
  void lane_truncate(int32_t lane, int64_t n_positions);
  int64_t lane_capacity(int32_t lane) const;
  int32_t slot(int32_t lane, int64_t pos) const;
  // Copies one slot's keys and values in every layer (see KvStorage::copy_slot).
  void copy_slot(int32_t from, int32_t to) { storage_->copy_slot(from, to); }

  // The prefix cache.
  // How many of keys[0..] are cached, in order from the first.
  int64_t n_cached_prefix(const std::vector<BlockKey>& keys) const;
  // Blocks admitting a lane of n_positions takes from n_free_blocks() when it adopts the first
  // n_adopt cached blocks of keys: the rest it is promised, plus adopted blocks nobody held (they
  // stop being evictable).
  int64_t admission_cost(const std::vector<BlockKey>& keys, int64_t n_adopt, int64_t n_positions) const;
  // Gives an empty lane the first n cached blocks of keys, by reference (n <= n_cached_prefix).
  void lane_adopt(int32_t lane, const std::vector<BlockKey>& keys, int64_t n);
  // Publishes the lane's block `index` (every position in it committed) under key. `extras` rides
  // along: what a lane adopting the block needs besides K/V (a drafter's taps; may be empty). False
  // when the key is already cached (an identical block elsewhere): this one stays private.
  bool publish(int32_t lane, int64_t index, const BlockKey& key, std::vector<float> extras);
  // The extras published with the lane's block `index`; empty for a block never published.
  const std::vector<float>& block_extras(int32_t lane, int64_t index) const;
  // The physical block of a cached key, or -1, and the extras published with it.
  int32_t cached_block(const BlockKey& key) const;
  const std::vector<float>& cached_extras(const BlockKey& key) const;
  // Puts a block read from elsewhere (a saved slot) into the cache under key, unless it is there
  // (then it becomes the most recently used): a free block, or the least recently used cached one.
  // False when every block is held or promised.
  bool insert_cached(const BlockKey& key, const std::vector<uint8_t>& kv_bytes, std::vector<float> extras);
  // Forgets the block cached under key, if any: free once nobody holds it.
  void forget(const BlockKey& key);

 private:
  struct BlockInfo {
    int32_t refs = 0;
    bool is_keyed = false;
    BlockKey key;
    std::vector<float> extras;
    std::list<int32_t>::iterator lru;  // valid while keyed and unreferenced
  };
  int32_t take_block();  // a free block, else the least recently used cached one (evicted)
  void release(int32_t block);
  void unkey(int32_t block);
  int64_t outstanding(int32_t lane) const;

  std::unique_ptr<KvStorage> storage_;
  int64_t n_blocks_;
  int64_t block_size_;
  std::vector<int32_t> free_blocks_;
  std::vector<BlockInfo> blocks_;
  std::list<int32_t> lru_;  // cached, unreferenced blocks, least recently used first
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> by_key_;
  std::vector<std::vector<int32_t>> block_tables_;  // per lane
  std::vector<int64_t> promised_;                   // per lane, blocks
  std::vector<bool> lane_open_;
  int64_t n_outstanding_ = 0;  // promised blocks lanes have not drawn yet
  int64_t n_evictions_ = 0;
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
