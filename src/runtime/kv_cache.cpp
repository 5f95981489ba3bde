// The KV pool and the prefix cache: block keys, tables, references, promises and eviction.
#include "runtime/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/sha256.h"

namespace tf {

size_t BlockKeyHash::operator()(const BlockKey& key) const {
  size_t h;
  std::memcpy(&h, key.digest.data(), sizeof h);  // already uniform: a SHA-256 digest
  return h;
}

BlockKey root_block_key(std::string_view model_id, std::string_view salt) {
  Sha256 hasher;
  // Lengths first, so no (model, salt) pair can be spelled as another.
  const std::string lengths = std::to_string(model_id.size()) + ":" + std::to_string(salt.size()) + ":";
  hasher.update(lengths);
  hasher.update(model_id);
  hasher.update(salt);
  return {hasher.digest()};
}

BlockKey next_block_key(const BlockKey& parent, const int32_t* tokens, int64_t n_tokens) {
  Sha256 hasher;
  hasher.update(parent.digest.data(), parent.digest.size());
  for (int64_t i = 0; i < n_tokens; ++i) {  // little-endian, whatever the host
    const auto value = static_cast<uint32_t>(tokens[i]);
    const uint8_t bytes[4] = {uint8_t(value), uint8_t(value >> 8), uint8_t(value >> 16), uint8_t(value >> 24)};
    hasher.update(bytes, 4);
  }
  return {hasher.digest()};
}

std::vector<BlockKey> block_keys(const BlockKey& root, const std::vector<int32_t>& tokens, int64_t n_positions,
                                 int64_t block_size) {
  std::vector<BlockKey> keys;
  BlockKey parent = root;
  for (int64_t begin = 0; begin + block_size <= n_positions; begin += block_size) {
    parent = next_block_key(parent, tokens.data() + begin, block_size);
    keys.push_back(parent);
  }
  return keys;
}

KvCache::KvCache(std::unique_ptr<KvStorage> storage, int64_t n_blocks, int64_t block_size)
    : storage_(std::move(storage)), n_blocks_(n_blocks), block_size_(block_size), blocks_(size_t(n_blocks)) {
  if (storage_->n_slots() != n_blocks * block_size) fail_internal("KV storage has the wrong number of slots");
  // Hand out low block numbers first so a lone lane's slots are contiguous.
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_blocks_.push_back(int32_t(b));
}

int64_t KvCache::n_free_blocks() const {
  return int64_t(free_blocks_.size() + lru_.size()) - n_outstanding_;
}

KvPoolStats KvCache::stats() const {
  KvPoolStats stats;
  stats.n_blocks = n_blocks_;
  stats.free = int64_t(free_blocks_.size());
  stats.cached = int64_t(lru_.size());
  stats.in_use = n_blocks_ - stats.free - stats.cached;
  stats.evictions = n_evictions_;
  return stats;
}

int32_t KvCache::lane_open() {
  for (size_t i = 0; i < lane_open_.size(); ++i)
    if (!lane_open_[i]) {
      lane_open_[i] = true;
      return int32_t(i);
    }
  lane_open_.push_back(true);
  block_tables_.emplace_back();
  promised_.push_back(0);
  return int32_t(lane_open_.size() - 1);
}

void KvCache::lane_close(int32_t lane) {
  lane_truncate(lane, 0);
  n_outstanding_ -= outstanding(lane);
  promised_[size_t(lane)] = 0;
  lane_open_[size_t(lane)] = false;
}

int64_t KvCache::outstanding(int32_t lane) const {
  return std::max<int64_t>(0, promised_[size_t(lane)] - int64_t(block_tables_[size_t(lane)].size()));
}

bool KvCache::lane_promise(int32_t lane, int64_t n_positions) {
  const int64_t before = outstanding(lane);
  const int64_t wanted = std::max(promised_[size_t(lane)], blocks_for(n_positions));
  const int64_t after = std::max<int64_t>(0, wanted - int64_t(block_tables_[size_t(lane)].size()));
  if (after - before > n_free_blocks()) return false;
  promised_[size_t(lane)] = wanted;
  n_outstanding_ += after - before;
  return true;
}

bool KvCache::lane_reserve(int32_t lane, int64_t n_positions) {
  auto& table = block_tables_[size_t(lane)];
  const int64_t needed = blocks_for(n_positions) - int64_t(table.size());
  if (needed <= 0) return true;
  // Drawing a promised block uses up its promise; past the promise it must be free for anyone.
  const int64_t from_promise = std::min(needed, outstanding(lane));
  if (needed - from_promise > n_free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i) table.push_back(take_block());
  n_outstanding_ -= from_promise;
  return true;
}

int32_t KvCache::take_block() {
  int32_t block;
  if (!free_blocks_.empty()) {
    block = free_blocks_.back();
    free_blocks_.pop_back();
  } else {
    if (lru_.empty()) fail_internal("the KV pool ran out of blocks");
    block = lru_.front();
    unkey(block);
    free_blocks_.pop_back();  // unkey freed it
    ++n_evictions_;
  }
  blocks_[size_t(block)].refs = 1;
  return block;
}

void KvCache::unkey(int32_t block) {
  BlockInfo& info = blocks_[size_t(block)];
  if (!info.is_keyed) return;
  by_key_.erase(info.key);
  info.is_keyed = false;
  info.extras = {};
  if (info.refs == 0) {
    lru_.erase(info.lru);
    free_blocks_.push_back(block);
  }
}

void KvCache::release(int32_t block) {
  BlockInfo& info = blocks_[size_t(block)];
  if (--info.refs > 0) return;
  if (info.is_keyed) {
    info.lru = lru_.insert(lru_.end(), block);
  } else {
    free_blocks_.push_back(block);
  }
}

void KvCache::lane_truncate(int32_t lane, int64_t n_positions) {
  auto& table = block_tables_[size_t(lane)];
  const int64_t before = outstanding(lane);
  const int64_t keep = blocks_for(n_positions);
  while (int64_t(table.size()) > keep) {
    release(table.back());
    table.pop_back();
  }
  n_outstanding_ += outstanding(lane) - before;
}

int64_t KvCache::lane_capacity(int32_t lane) const {
  return int64_t(block_tables_[size_t(lane)].size()) * block_size_;
}

int32_t KvCache::slot(int32_t lane, int64_t pos) const {
  const auto& table = block_tables_[size_t(lane)];
  int64_t block = pos / block_size_;
  if (pos < 0 || block >= int64_t(table.size()))
    fail_internal("position " + std::to_string(pos) + " of lane " + std::to_string(lane) +
         " has no KV slot");
  return int32_t(table[size_t(block)] * block_size_ + pos % block_size_);
}

int64_t KvCache::n_cached_prefix(const std::vector<BlockKey>& keys) const {
  int64_t n = 0;
  while (n < int64_t(keys.size()) && by_key_.count(keys[size_t(n)])) ++n;
  return n;
}

int64_t KvCache::admission_cost(const std::vector<BlockKey>& keys, int64_t n_adopt, int64_t n_positions) const {
  int64_t cost = std::max<int64_t>(0, blocks_for(n_positions) - n_adopt);
  for (int64_t i = 0; i < n_adopt; ++i) cost += blocks_[size_t(by_key_.at(keys[size_t(i)]))].refs == 0;
  return cost;
}

void KvCache::lane_adopt(int32_t lane, const std::vector<BlockKey>& keys, int64_t n) {
  auto& table = block_tables_[size_t(lane)];
  if (!table.empty() || promised_[size_t(lane)] != 0) fail_internal("only an empty lane adopts a cached prefix");
  for (int64_t i = 0; i < n; ++i) {
    auto found = by_key_.find(keys[size_t(i)]);
    if (found == by_key_.end()) fail_internal("adopting a block that is not cached");
    BlockInfo& info = blocks_[size_t(found->second)];
    if (info.refs++ == 0) lru_.erase(info.lru);
    table.push_back(found->second);
  }
}

bool KvCache::publish(int32_t lane, int64_t index, const BlockKey& key, std::vector<float> extras) {
  const int32_t block = block_tables_[size_t(lane)].at(size_t(index));
  BlockInfo& info = blocks_[size_t(block)];
  if (info.is_keyed) return info.key == key;
  if (by_key_.count(key)) return false;
  info.is_keyed = true;
  info.key = key;
  info.extras = std::move(extras);
  by_key_.emplace(key, block);
  return true;
}

const std::vector<float>& KvCache::block_extras(int32_t lane, int64_t index) const {
  return blocks_[size_t(block_tables_[size_t(lane)].at(size_t(index)))].extras;
}

int32_t KvCache::cached_block(const BlockKey& key) const {
  auto found = by_key_.find(key);
  return found == by_key_.end() ? -1 : found->second;
}

const std::vector<float>& KvCache::cached_extras(const BlockKey& key) const {
  return blocks_[size_t(by_key_.at(key))].extras;
}

bool KvCache::insert_cached(const BlockKey& key, const std::vector<uint8_t>& kv_bytes, std::vector<float> extras) {
  if (const auto found = by_key_.find(key); found != by_key_.end()) {
    // Already cached: now the most recently used, so the blocks inserted after it evict others first.
    const BlockInfo& info = blocks_[size_t(found->second)];
    if (info.refs == 0) lru_.splice(lru_.end(), lru_, info.lru);
    return true;
  }
  if (int64_t(kv_bytes.size()) != storage_->bytes_for(block_size_)) fail_internal("a cached block of the wrong size");
  if (n_free_blocks() < 1) return false;
  const int32_t block = take_block();
  storage_->write_slots(int32_t(block * block_size_), block_size_, kv_bytes.data());
  BlockInfo& info = blocks_[size_t(block)];
  info.is_keyed = true;
  info.key = key;
  info.extras = std::move(extras);
  by_key_.emplace(key, block);
  release(block);  // nobody holds it: cached, most recently used
  return true;
}

void KvCache::forget(const BlockKey& key) {
  const int32_t block = cached_block(key);
  if (block >= 0) unkey(block);
}

void resolve_key_slots(const Batch& batch, const KvCache& kv, KeySlots& out) {
  const auto& rows = batch.rows;
  out.slots.clear();
  out.offsets.resize(rows.size());
  out.n_keys.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t offset = out.slots.size();
    if (offset + size_t(rows[r].pos) + 1 > size_t(INT32_MAX)) fail_internal("too many keys in one batch");
    out.offsets[r] = int32_t(offset);
    out.n_keys[r] = rows[r].pos + 1;
    out.slots.resize(offset + size_t(rows[r].pos) + 1, -1);
    int32_t* slots = out.slots.data() + offset;
    // The in-batch chain first (this row and its ancestors), then the committed positions below it.
    int64_t chain = int64_t(r);
    int64_t first = chain;
    while (chain >= 0) {
      const BatchRow& row = rows[size_t(chain)];
      slots[row.pos] = row.kv_slot;
      first = chain;
      int64_t parent = row.parent;
      if (parent >= 0 && (parent >= chain || rows[size_t(parent)].pos != row.pos - 1 ||
                          rows[size_t(parent)].lane != row.lane))
        fail_internal("batch row " + std::to_string(chain) + " has an invalid parent");
      chain = parent;
    }
    int32_t lane = rows[size_t(first)].lane;
    for (int32_t p = 0; p < rows[size_t(first)].pos; ++p) slots[p] = kv.slot(lane, p);
  }
}

}  // namespace tf
