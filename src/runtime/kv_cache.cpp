

#include "runtime/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

KvCache::KvCache(std::unique_ptr<KvStorage> storage, int64_t n_blocks, int64_t block_size)
    : storage_(std::move(storage)), n_blocks_(n_blocks), block_size_(block_size) {
  if (storage_->n_slots() != n_blocks * block_size) fail_internal("KV storage has the wrong number of slots");
  // Hand out low block numbers first so a lone lane's slots are contiguous.
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_blocks_.push_back(int32_t(b));
}

int32_t KvCache::lane_open() {
  for (size_t i = 0; i < lane_open_.size(); ++i)
    if (!lane_open_[i]) {
      lane_open_[i] = true;
      return int32_t(i);
    }
  lane_open_.push_back(true);
  block_tables_.emplace_back();
  return int32_t(lane_open_.size() - 1);
}

void KvCache::lane_close(int32_t lane) {
  lane_truncate(lane, 0);
  lane_open_[size_t(lane)] = false;
}

bool KvCache::lane_reserve(int32_t lane, int64_t n_positions) {
  auto& table = block_tables_[size_t(lane)];
  int64_t needed = blocks_for(n_positions) - int64_t(table.size());
  if (needed <= 0) return true;
  if (needed > n_free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i) {
    table.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return true;
}

void KvCache::lane_truncate(int32_t lane, int64_t n_positions) {
  auto& table = block_tables_[size_t(lane)];
  int64_t keep = blocks_for(n_positions);
  while (int64_t(table.size()) > keep) {
    free_blocks_.push_back(table.back());
    table.pop_back();
  }
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
