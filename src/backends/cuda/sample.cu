// Sampling without sorting: one cluster of 8 or 16 blocks per row, each block holding its
// share of the row in shared memory. Every selection (the k-th best token, the top-p cut, the drawn
// token) is a radix search over 32-bit values whose integer weight sums are exchanged across the
// cluster through distributed shared memory; the arithmetic is sampling_math.h's, so each row's
// token is the CPU sampler's.
#include "backends/cuda/sample.cuh"

#include <cooperative_groups.h>

#include <climits>
#include <cmath>

#include "backends/cuda/cuda_check.cuh"
#include "sampling/philox.h"
#include "sampling/sampling_math.h"

namespace tf::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxClusterBlocks = 16;
// Calls of at most this many rows take clusters of 16 blocks (more of the chip for a lone row).
constexpr int64_t kFewRows = 4;
constexpr unsigned kFullWarp = 0xffffffffu;
// A search fixes 8 bits of the 32-bit value per pass: 256 buckets, at most 4 passes.
constexpr int kDigitBits = 8;
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kBucketsPerLane = kBuckets / 32;
static_assert(kThreads >= kBuckets && kWarps == 32, "the bucket sums and the digit choice use one thread a bucket");
constexpr int kGroups = kThreads / kBuckets;  // groups of threads reading the peers' buckets, a quarter of the peers each
constexpr int kPeersPerGroup = (kMaxClusterBlocks + kGroups - 1) / kGroups;

// What a block shows the rest of its cluster after a pass over its share. A bucket's weight is
// weight_high * 2^16 + weight_low, each half added by native 32-bit shared atomics (a 64-bit one
// is a compare-and-swap loop, which spins where many threads hit one bucket); neither half can
// overflow while a share holds fewer than 2^16 tokens of weight at most 2^31 each.
struct Exchange {
  unsigned int weight_high[kBuckets];  // sum over runs of (run weight >> 16)
  unsigned int weight_low[kBuckets];   // sum over runs of (run weight & 0xFFFF)
  unsigned int count[kBuckets];        // how many members gave the weight
  unsigned long long best_key;         // the block's best rank key (the first exchange only)
};

// Adds a run of members of one digit to the block's buckets. When every lane of the warp with a
// run holds the same digit (the common case: the low buckets take most tokens), one lane adds the
// warp's sums. Called by the whole warp.
__device__ __forceinline__ void add_runs(Exchange& exchange, int digit, unsigned long long weight, unsigned int count) {
  const unsigned has_run = __ballot_sync(kFullWarp, count != 0);
  if (has_run == 0) return;
  const int leader_digit = __shfl_sync(kFullWarp, digit, __ffs(has_run) - 1);
  const unsigned same = __ballot_sync(kFullWarp, count != 0 && digit == leader_digit);
  const unsigned high = count != 0 ? unsigned(weight >> 16) : 0u;
  const unsigned low = count != 0 ? unsigned(weight & 0xFFFFu) : 0u;
  if (same == has_run) {
    const unsigned warp_high = __reduce_add_sync(kFullWarp, high);
    const unsigned warp_low = __reduce_add_sync(kFullWarp, low);
    const unsigned warp_count = __reduce_add_sync(kFullWarp, count);
    if (int(threadIdx.x) % 32 == __ffs(has_run) - 1) {
      atomicAdd(&exchange.weight_high[leader_digit], warp_high);
      atomicAdd(&exchange.weight_low[leader_digit], warp_low);
      atomicAdd(&exchange.count[leader_digit], warp_count);
    }
  } else if (count != 0) {
    atomicAdd(&exchange.weight_high[digit], high);
    atomicAdd(&exchange.weight_low[digit], low);
    atomicAdd(&exchange.count[digit], count);
  }
}

struct BlockScratch {
  Exchange exchange[2];  // alternate passes use alternate copies, so one cluster barrier a pass suffices
  unsigned long long group_weight[kGroups][kBuckets];  // the sums over each group's peers
  unsigned int group_count[kGroups][kBuckets];
  unsigned long long total_weight[kBuckets];  // the cluster's sums for the current pass
  unsigned int total_count[kBuckets];
  uint32_t exp2_table[64];
  unsigned long long warp_key[kWarps];
  unsigned long long peer_key[kMaxClusterBlocks];
  int warp_hits[kWarps];
  int block_ties[kMaxClusterBlocks];
  int found_index;
  // Warp 0's choice after each pass, read by every thread.
  bool is_found;
  int digit;
  unsigned int digit_count;
  unsigned long long need;
  unsigned long long above;
};

// A rank prefix over 32-bit values, ties by id: members with value > value, and those with
// value == value and id <= last_tie_id (INT_MAX: all of them, -1: none).
struct Cut {
  uint32_t value;
  int last_tie_id;
  __device__ bool keeps(uint32_t v, int id) const { return v > value || (v == value && id <= last_tie_id); }
};

struct SearchResult {
  Cut cut;
  int token;  // the member that completes the need, in the block that holds it; -1 elsewhere
};

// (order bits of value) << 32 | (0xFFFFFFFF - id): the larger key ranks first, ties by lower id.
__device__ __forceinline__ unsigned long long rank_key(float value, int id) {
  return (static_cast<unsigned long long>(sampling_order_bits(value)) << 32) | (0xFFFFFFFFu - uint32_t(id));
}

__device__ __forceinline__ float value_of_order_bits(uint32_t ordered) {
  return __uint_as_float((ordered & 0x80000000u) ? (ordered & 0x7FFFFFFFu) : ~ordered);
}

// The local index of the nth (from 1) member of the block's share, in id order, for which
// is_member holds; every thread of the block gets it.
template <class IsMember>
__device__ int nth_local(int n_local, const IsMember& is_member, int nth, BlockScratch& scratch) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int base = 0; base < n_local; base += kThreads) {
    const int i = base + int(threadIdx.x);
    const bool hit = i < n_local && is_member(i);
    const int n_hits = __syncthreads_count(hit);
    if (n_hits < nth) {
      nth -= n_hits;
      continue;
    }
    const unsigned hits = __ballot_sync(kFullWarp, hit);
    if (lane == 0) scratch.warp_hits[warp] = __popc(hits);
    __syncthreads();
    int before = __popc(hits & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) before += scratch.warp_hits[w];
    if (hit && before + 1 == nth) scratch.found_index = i;
    __syncthreads();
    return scratch.found_index;
  }
  return -1;
}

// The largest value V such that the members with value >= V weigh at least need, where
// need = need_for(total weight of all members) >= 1, as a cut that takes just enough of the
// members with value V (lowest ids first) for the need. member(i) gives the value and weight of
// local token i (weight 0: not a member); tie_weight(V) is the weight of each member of value V.
// Each pass buckets, by their next 8 bits, the members matching the bits fixed so far; the
// cluster's bucket sums pick the largest digit whose cumulative weight reaches the need. Only
// integer sums and counts are taken, so the order of the visits does not matter.
template <class Member, class NeedFor, class TieWeight>
__device__ SearchResult cluster_search(const cg::cluster_group& cluster, int n_local, int first_id, int& round,
                                       const Member& member, const NeedFor& need_for, const TieWeight& tie_weight,
                                       BlockScratch& scratch) {
  const int thread = int(threadIdx.x), lane = thread % 32;
  const int n_blocks = int(cluster.num_blocks());
  uint32_t prefix = 0;
  unsigned long long above = 0, need = 0;
  for (int shift = 32 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    Exchange& exchange = scratch.exchange[round++ & 1];
    if (thread < kBuckets) {
      exchange.weight_high[thread] = 0;
      exchange.weight_low[thread] = 0;
      exchange.count[thread] = 0;
    }
    __syncthreads();
    const uint32_t fixed_mask = shift == 32 - kDigitBits ? 0u : ~0u << (shift + kDigitBits);
    // Runs of one digit are added at once: the low buckets take most tokens.
    int run_digit = -1;
    unsigned long long run_weight = 0;
    unsigned int run_count = 0;
    // Whole warps walk the share together, so add_runs sees every lane.
    for (int base = 0; base < n_local; base += kThreads) {
      const int i = base + thread;
      if (i < n_local) {
        const auto [value, weight] = member(i);
        const int digit = int(value >> shift) & (kBuckets - 1);
        if (weight != 0 && (value & fixed_mask) == prefix) {
          if (digit != run_digit && run_count != 0) {
            atomicAdd(&exchange.weight_high[run_digit], unsigned(run_weight >> 16));
            atomicAdd(&exchange.weight_low[run_digit], unsigned(run_weight & 0xFFFFu));
            atomicAdd(&exchange.count[run_digit], run_count);
            run_weight = 0;
            run_count = 0;
          }
          run_digit = digit;
          run_weight += weight;
          ++run_count;
        }
      }
    }
    add_runs(exchange, run_digit, run_weight, run_count);
    cluster.sync();
    {
      // Four groups of threads read a quarter of the peers each, all their loads in flight at once.
      const int bucket = thread % kBuckets, group = thread / kBuckets;
      unsigned int highs[kPeersPerGroup], lows[kPeersPerGroup], counts[kPeersPerGroup];
#pragma unroll
      for (int j = 0; j < kPeersPerGroup; ++j) {
        const int rank = group + kGroups * j;
        highs[j] = lows[j] = counts[j] = 0;
        if (rank < n_blocks) {
          const Exchange* peer = cluster.map_shared_rank(&exchange, rank);
          highs[j] = peer->weight_high[bucket];
          lows[j] = peer->weight_low[bucket];
          counts[j] = peer->count[bucket];
        }
      }
      unsigned long long weight = 0;
      unsigned int count = 0;
#pragma unroll
      for (int j = 0; j < kPeersPerGroup; ++j) {
        weight += (static_cast<unsigned long long>(highs[j]) << 16) + lows[j];
        count += counts[j];
      }
      scratch.group_weight[group][bucket] = weight;
      scratch.group_count[group][bucket] = count;
    }
    __syncthreads();
    if (thread < kBuckets) {
      unsigned long long weight = 0;
      unsigned int count = 0;
      for (int group = 0; group < kGroups; ++group) {
        weight += scratch.group_weight[group][thread];
        count += scratch.group_count[group][thread];
      }
      scratch.total_weight[thread] = weight;
      scratch.total_count[thread] = count;
    }
    __syncthreads();
    if (thread < 32) {
      // Lane l holds digits 255 - 8l down to 248 - 8l, so lane order is rank order.
      unsigned long long weights[kBucketsPerLane];
      unsigned long long lane_weight = 0;
      for (int j = 0; j < kBucketsPerLane; ++j) {
        weights[j] = scratch.total_weight[kBuckets - 1 - lane * kBucketsPerLane - j];
        lane_weight += weights[j];
      }
      unsigned long long through_lane = lane_weight;
      for (int offset = 1; offset < 32; offset *= 2) {
        const unsigned long long lower = __shfl_up_sync(kFullWarp, through_lane, offset);
        if (lane >= offset) through_lane += lower;
      }
      if (shift == 32 - kDigitBits) need = need_for(__shfl_sync(kFullWarp, through_lane, 31));
      unsigned long long cumulative = above + (through_lane - lane_weight);
      int hit = -1;
      for (int j = 0; j < kBucketsPerLane && hit < 0; ++j) {
        if (cumulative + weights[j] >= need) {
          hit = j;
        } else {
          cumulative += weights[j];
        }
      }
      const unsigned lanes_hit = __ballot_sync(kFullWarp, hit >= 0);
      if (lane == 0) {
        scratch.is_found = lanes_hit != 0;
        scratch.need = need;
      }
      if (lanes_hit != 0 && lane == __ffs(lanes_hit) - 1) {
        const int digit = kBuckets - 1 - lane * kBucketsPerLane - hit;
        scratch.digit = digit;
        scratch.digit_count = scratch.total_count[digit];
        scratch.above = cumulative;
      }
    }
    __syncthreads();
    // Past the first pass a digit is always found: a bucket's weight is exactly its sub-buckets'.
    if (!scratch.is_found) return {{0u, INT_MAX}, -1};
    need = scratch.need;
    above = scratch.above;
    const int digit = scratch.digit;
    prefix |= uint32_t(digit) << shift;
    if (scratch.digit_count == 1) {
      // One member in the bucket: it completes the need, and the cut is the bucket's floor.
      int token = -1;
      const uint32_t bucket_mask = ~0u << shift;
      for (int i = thread; i < n_local; i += kThreads) {
        const auto [value, weight] = member(i);
        if (weight != 0 && (value & bucket_mask) == prefix) token = first_id + i;
      }
      return {{prefix, INT_MAX}, token};
    }
    if (shift == 0) {
      // Every bit fixed: the members of value `prefix` tie, and the need takes the first j of them,
      // counted across the blocks in rank (id) order.
      if (thread < n_blocks) scratch.block_ties[thread] = int(cluster.map_shared_rank(&exchange, thread)->count[digit]);
      __syncthreads();
      const unsigned long long each = tie_weight(prefix);
      int nth = int((need - above + each - 1) / each);
      const int rank = int(cluster.block_rank());
      int owner = 0;
      while (owner < n_blocks - 1 && nth > scratch.block_ties[owner]) nth -= scratch.block_ties[owner++];
      if (rank != owner) return {{prefix, rank < owner ? INT_MAX : -1}, -1};
      const int index = nth_local(
          n_local,
          [&](int i) {
            const auto [value, weight] = member(i);
            return weight != 0 && value == prefix;
          },
          nth, scratch);
      return {{prefix, first_id + index}, thread == 0 ? first_id + index : -1};
    }
  }
  return {{0u, INT_MAX}, -1};  // not reached
}

__constant__ uint32_t kExp2Table[64] = {TF_SAMPLING_EXP2_TABLE};

struct ValueAndWeight {
  uint32_t value;
  uint32_t weight;
};

__global__ void __launch_bounds__(kThreads, 1)
    sample_rows_kernel(const float* __restrict__ logits, int n_vocab, int share, bool is_aligned,
                       const GpuSamplingRow* __restrict__ rows, int32_t* __restrict__ ids) {
  extern __shared__ float4 dynamic_shared[];
  __shared__ BlockScratch scratch;
  const cg::cluster_group cluster = cg::this_cluster();
  const int n_blocks = int(cluster.num_blocks());
  const int row_index = int(blockIdx.x) / n_blocks;
  const GpuSamplingRow params = rows[row_index];
  if (!(params.temperature > 0.0f)) return;  // the whole cluster leaves together
  const int thread = int(threadIdx.x), warp = thread / 32, lane = thread % 32;
  const int rank = int(cluster.block_rank());
  const int first_id = rank * share;
  const int n_local = max(0, min(share, n_vocab - first_id));
  float* values = reinterpret_cast<float*>(dynamic_shared);  // [n_local] this block's share
  const float* row = logits + int64_t(row_index) * n_vocab + first_id;
  if (thread < 64) scratch.exp2_table[thread] = kExp2Table[thread];

  // The share into shared memory (NaN as -inf, as the CPU ranks it) and its best key.
  unsigned long long best_key = 0;
  const auto load = [&](int i, float logit) {
    const float value = isnan(logit) ? -INFINITY : logit;
    values[i] = value;
    const unsigned long long key = rank_key(value, first_id + i);
    best_key = key > best_key ? key : best_key;
  };
  if (is_aligned) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    constexpr int kInFlight = 2;  // loads issued before the first is used
    for (int i = thread; i < n_local / 4; i += kInFlight * kThreads) {
      float4 fours[kInFlight];
      for (int u = 0; u < kInFlight; ++u)
        if (i + u * kThreads < n_local / 4) fours[u] = __ldg(row4 + i + u * kThreads);
      for (int u = 0; u < kInFlight; ++u) {
        const int j = i + u * kThreads;
        if (j >= n_local / 4) break;
        load(4 * j, fours[u].x);
        load(4 * j + 1, fours[u].y);
        load(4 * j + 2, fours[u].z);
        load(4 * j + 3, fours[u].w);
      }
    }
    for (int i = (n_local / 4) * 4 + thread; i < n_local; i += kThreads) load(i, __ldg(row + i));
  } else {
    for (int i = thread; i < n_local; i += kThreads) load(i, __ldg(row + i));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned long long other = __shfl_xor_sync(kFullWarp, best_key, offset);
    best_key = other > best_key ? other : best_key;
  }
  if (lane == 0) scratch.warp_key[warp] = best_key;
  __syncthreads();
  int round = 0;
  Exchange& first_exchange = scratch.exchange[round++ & 1];
  if (thread == 0) {
    unsigned long long key = 0;
    for (int w = 0; w < kWarps; ++w) key = scratch.warp_key[w] > key ? scratch.warp_key[w] : key;
    first_exchange.best_key = key;
  }
  cluster.sync();
  // One thread a peer reads its best key; every thread then takes the maximum.
  if (thread < n_blocks) scratch.peer_key[thread] = cluster.map_shared_rank(&first_exchange, thread)->best_key;
  __syncthreads();
  best_key = 0;
  for (int peer = 0; peer < n_blocks; ++peer) best_key = scratch.peer_key[peer] > best_key ? scratch.peer_key[peer] : best_key;
  const int best_id = int(0xFFFFFFFFu - uint32_t(best_key));
  const float best_value = value_of_order_bits(uint32_t(best_key >> 32));
  if (!isfinite(best_value)) {
    // All -inf, or some +inf: no distribution; the CPU returns the best-ranked token.
    if (rank == 0 && thread == 0) ids[row_index] = best_id;
    cluster.sync();  // no block leaves while another may still read its shared memory
    return;
  }

  // Top-k: the candidates are the k best by (value, id).
  Cut candidates{0u, INT_MAX};
  const bool has_top_k = params.top_k > 0 && params.top_k < n_vocab;
  if (has_top_k) {
    const auto every_token = [&](int i) { return ValueAndWeight{sampling_order_bits(values[i]), 1u}; };
    const auto k = static_cast<unsigned long long>(params.top_k);
    candidates = cluster_search(cluster, n_local, first_id, round, every_token, [k](unsigned long long) { return k; },
                                [](uint32_t) { return 1ull; }, scratch)
                     .cut;
  }

  // Each candidate's integer mass replaces its value in shared memory; other tokens get 0.
  uint32_t* masses = reinterpret_cast<uint32_t*>(values);
  const float inverse_temperature = __fdiv_rn(1.0f, params.temperature);
  for (int i = thread; i < n_local; i += kThreads) {
    const float value = values[i];
    const bool is_candidate = !has_top_k || candidates.keeps(sampling_order_bits(value), first_id + i);
    masses[i] = is_candidate ? sampling_mass(sampling_gap(value, best_value, inverse_temperature), scratch.exp2_table) : 0u;
  }
  const auto mass_weight = [](uint32_t mass) { return static_cast<unsigned long long>(mass); };

  // Top-p: the shortest rank prefix whose mass reaches ceil(top_p * total), at least one token.
  const bool has_top_p = params.top_p < 1.0f;
  Cut top_p_cut{0u, INT_MAX};
  if (has_top_p) {
    const float top_p = fmaxf(params.top_p, 0.0f);
    const auto every_candidate = [&](int i) { return ValueAndWeight{masses[i], masses[i]}; };
    const auto need_for = [top_p](unsigned long long total) {
      const unsigned long long need = sampling_scaled_ceil(top_p, total);
      return need > 1 ? need : 1ull;
    };
    top_p_cut = cluster_search(cluster, n_local, first_id, round, every_candidate, need_for, mass_weight, scratch).cut;
  }
  // Min-p: masses of at least ceil(min_p * best mass); min_p above 1 acts as 1.
  uint32_t min_mass = 1;
  if (params.min_p > 0.0f) {
    const unsigned long long threshold = sampling_scaled_ceil(params.min_p, kSamplingMassOne);
    min_mass = threshold < kSamplingMassOne ? uint32_t(threshold) : kSamplingMassOne;
  }

  // The draw: the first kept token in rank order whose cumulative mass passes floor(u * kept mass).
  const auto kept = [&](int i) {
    const uint32_t mass = masses[i];
    const bool is_kept = mass >= min_mass && (!has_top_p || top_p_cut.keeps(mass, first_id + i));
    return ValueAndWeight{mass, is_kept ? mass : 0u};
  };
  const auto u = static_cast<uint32_t>(philox_uniform(params.seed, params.position) * 0x1p24f);
  const auto past_target = [u](unsigned long long kept_mass) { return sampling_target(kept_mass, u) + 1; };
  const SearchResult drawn = cluster_search(cluster, n_local, first_id, round, kept, past_target, mass_weight, scratch);
  if (drawn.token >= 0) ids[row_index] = drawn.token;
  cluster.sync();  // no block leaves while another may still read its shared memory
}

// The largest dynamic shared memory a block may take, raised once from the default 48 KB; clusters
// of 16 blocks allowed too.
int max_share_bytes() {
  static const int bytes = [] {
    int device = 0, optin = 0;
    TF_CUDA_CHECK(cudaGetDevice(&device));
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};
    TF_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sample_rows_kernel));
    const int dynamic_bytes = optin - int(attributes.sharedSizeBytes);
    TF_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_bytes));
    TF_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return dynamic_bytes;
  }();
  return bytes;
}

}  // namespace

void sample_rows_f32(const float* logits, int64_t n_rows, int64_t n_vocab, const GpuSamplingRow* rows, int32_t* ids,
                     cudaStream_t stream, int cluster_blocks) {
  if (cluster_blocks == 0) cluster_blocks = n_rows <= kFewRows ? 16 : 8;
  TF_CUDA_REQUIRE(cluster_blocks == 8 || cluster_blocks == 16, "sample_rows_f32: clusters of 8 or 16 blocks");
  TF_CUDA_REQUIRE(n_rows >= 0 && n_rows * cluster_blocks < (int64_t(1) << 31), "sample_rows_f32: bad row count");
  TF_CUDA_REQUIRE(n_vocab > 0 && n_vocab <= (int64_t(1) << 30), "sample_rows_f32: bad vocabulary size");
  if (n_rows == 0) return;
  // Each block's share a multiple of 4 tokens, so rows of a multiple of 4 load as float4.
  const int64_t share = (n_vocab + 4 * cluster_blocks - 1) / (4 * cluster_blocks) * 4;
  const auto share_bytes = size_t(share) * sizeof(float);
  TF_CUDA_REQUIRE(share_bytes <= size_t(max_share_bytes()) && share < (int64_t(1) << 16),
                  "sample_rows_f32: a vocabulary of " + std::to_string(n_vocab) + " does not fit the cluster's shared memory");
  const bool is_aligned = n_vocab % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(n_rows * cluster_blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = share_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = unsigned(cluster_blocks);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  TF_CUDA_CHECK(cudaLaunchKernelEx(&config, sample_rows_kernel, logits, int(n_vocab), int(share), is_aligned, rows, ids));
  TF_CUDA_CHECK_LAUNCH("sample_rows_kernel");
}

}  // namespace tf::cuda
