#include "engine/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

KvCache::KvCache(int64_t n_layers, int64_t kv_dim, int64_t n_blocks, int64_t block_size)
    : n_layers_(n_layers), kv_dim_(kv_dim), n_blocks_(n_blocks), block_size_(block_size) {
  size_t n = size_t(n_layers * n_blocks * block_size * kv_dim);
  keys_.assign(n, 0.0f);
  values_.assign(n, 0.0f);
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
    fail("internal: position " + std::to_string(pos) + " of lane " + std::to_string(lane) +
         " has no KV slot");
  return int32_t(table[size_t(block)] * block_size_ + pos % block_size_);
}

void KvCache::copy_slot(int32_t from, int32_t to) {
  for (int64_t layer = 0; layer < n_layers_; ++layer) {
    std::copy_n(keys(layer) + from * kv_dim_, kv_dim_, keys(layer) + to * kv_dim_);
    std::copy_n(values(layer) + from * kv_dim_, kv_dim_, values(layer) + to * kv_dim_);
  }
}

}  // namespace tf
