// The KV cache: fixed blocks of positions shared by all lanes, mapped per lane by a block table.
// Lanes of any length share the pool without fragmentation; a lane's logical position p lives
// at physical slot block_table[p / block_size] * block_size + p % block_size.
#pragma once
#include <cstdint>
#include <vector>

namespace tf {

constexpr int64_t kKvBlockSize = 16;
inline int64_t kv_blocks_for(int64_t n_positions) {
  return (n_positions + kKvBlockSize - 1) / kKvBlockSize;
}

class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t kv_dim, int64_t n_blocks, int64_t block_size = kKvBlockSize);

  float* keys(int64_t layer) { return keys_.data() + layer * layer_stride(); }      // [n_slots][kv_dim]
  float* values(int64_t layer) { return values_.data() + layer * layer_stride(); }  // [n_slots][kv_dim]
  int64_t kv_dim() const { return kv_dim_; }
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
  // Copies one slot's keys and values in every layer (a verified draft row moving from scratch
  // to its lane's position); the bits move unchanged.
  void copy_slot(int32_t from, int32_t to);

 private:
  int64_t layer_stride() const { return n_blocks_ * block_size_ * kv_dim_; }

  int64_t n_layers_;
  int64_t kv_dim_;
  int64_t n_blocks_;
  int64_t block_size_;
  std::vector<float> keys_;    // [n_layers][n_slots][kv_dim]
  std::vector<float> values_;  // [n_layers][n_slots][kv_dim]
  std::vector<int32_t> free_blocks_;
  std::vector<std::vector<int32_t>> block_tables_;  // per lane
  std::vector<bool> lane_open_;
};

}  // namespace tf
