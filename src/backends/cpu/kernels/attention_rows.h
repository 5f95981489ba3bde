// What both CPU attention kernels (attention.cpp's f32 one and attention_bf16_dot.cpp) share about
// their rows: the arguments, the unit of work, and how rows of one sequence are found.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/attention.h"

namespace tf::cpu::attention_rows {

// Element: the cache's, float (or, on the bf16 path, bf16 as uint16_t).
template <class Element>
struct Args {
  const float* q;
  const Element* k_cache;
  const Element* v_cache;
  KvLayout layout;
  const int32_t* const* key_slots;
  const int32_t* n_keys;
  AttentionShape shape;
  float* out;
};

// Rows that share a unit of work: a block of consecutive rows, one head or a pair of heads of a
// group. The block walks its keys chunk by chunk and every row takes each chunk in turn, so a
// chunk's keys and values (32 KB at head_dim 64) come from L1 for all but its first row: one row at a
// time read every key from L2 or beyond for every row. Each row's operations are the same, in the
// same order, as if it ran alone; only their interleaving with other rows changes.
constexpr int64_t kBlockRows = 8;

// Runs that would fill fewer lanes than this stay a row at a time: a lane key costs the same with
// any number of lanes filled, and below 12 of 16 the rows alone are faster (at 6 lanes 1.7x slower,
// at 12 even; bench/receipts/cpu-attention-rows-in-lanes.md).
constexpr int64_t kFewestLanes = 12;

// Whether row r has keys and reads the slots of row `longest` at every position both have (one
// key list a prefix of the other: rows of one sequence).
template <class Element>
inline bool shares_keys(const Args<Element>& a, int64_t r, int64_t longest) {
  const int64_t n = std::min(a.n_keys[r], a.n_keys[longest]);
  return a.n_keys[r] > 0 &&
         (a.key_slots[r] == a.key_slots[longest] ||
          std::memcmp(a.key_slots[r], a.key_slots[longest], size_t(n) * sizeof(int32_t)) == 0);
}

}  // namespace tf::cpu::attention_rows
