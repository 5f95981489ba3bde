// Sampling without sorting, one block per row: every selection (the k-th best token, the top-p
// cut, the drawn token) is a radix search for the largest 64-bit rank key whose cumulative weight,
// over the tokens ranked at or above it, reaches a need.
#include "backends/cuda/sample.cuh"

#include <cmath>

#include "backends/cuda/cuda_check.cuh"
#include "sampling/philox.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 32, "block_max and block_sum finish in one warp, one lane per warp");
constexpr unsigned kFullWarp = 0xffffffffu;
// A search fixes 8 key bits per pass over the row: 256 buckets, at most 8 passes.
constexpr int kDigitBits = 8;
constexpr int kBuckets = 1 << kDigitBits;
constexpr int kBucketsPerLane = kBuckets / 32;
constexpr int kFirstShift = 64 - kDigitBits;
// Each pass's histogram has several copies, lane l adding to copy l % kHistogramCopies, so that
// lanes of a warp hitting one bucket (the high bits of floats cluster) collide less.
constexpr int kHistogramCopies = 8;
constexpr int kCopyStride = kBuckets + 1;  // puts one bucket's copies in different banks
// Once this few members match a search's prefix, they are gathered into shared memory and the
// remaining passes read them there instead of recomputing every token of the row.
constexpr int kListCapacity = 2048;
// Probabilities enter the searches as integer masses p * 2^31 rounded to nearest (rounding down
// would bias a sum over 10^5 tail tokens by more than one of them). Integer sums are exact, so a
// mass total is the same in any order (shared-memory atomics may add it), and a bucket's mass is
// exactly the sum of its sub-buckets', which keeps the digit-by-digit choices consistent. The
// masses sum to about 2^31, so every total fits 32 bits.
constexpr float kMassScale = 0x1p31f;

// (order-preserving bits of value) << 32 | (0xFFFFFFFF - id): a larger key ranks first, equal
// values rank the lower id first, and no two tokens share a key. value must not be NaN.
__device__ __forceinline__ uint64_t rank_key(float value, int id) {
  if (value == 0.0f) value = 0.0f;  // -0 equals +0 on the CPU, so both rank by id alone
  const uint32_t bits = __float_as_uint(value);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (uint64_t(ordered) << 32) | (0xFFFFFFFFu - uint32_t(id));
}

__device__ __forceinline__ int id_of(uint64_t key) { return int(0xFFFFFFFFu - uint32_t(key)); }

// The smallest key of any token whose value is at least `value`.
__device__ __forceinline__ uint64_t floor_key(float value) { return rank_key(value, 0) & 0xFFFFFFFF00000000ull; }

struct BlockScratch {
  unsigned int bucket_weight[kHistogramCopies * kCopyStride];  // [copy][digit] one search pass's weights
  unsigned int bucket_count[kHistogramCopies * kCopyStride];   // [copy][digit] how many tokens gave them
  uint64_t list_keys[kListCapacity];  // the gathered members, in no particular order
  uint32_t list_weights[kListCapacity];
  unsigned int list_size;
  uint64_t warp_max[kWarps];
  float warp_sum[kWarps];
  uint64_t block_max;
  float block_sum;
  // Warp 0's choice after each search pass, read by every thread.
  bool is_found;
  int digit;
  unsigned int digit_count;
  uint64_t need;
  uint64_t above;
};

// The largest `value` over the block, in every thread (max has no order to fix).
__device__ uint64_t block_max(uint64_t value, BlockScratch& scratch) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int offset = 16; offset > 0; offset /= 2) {
    const uint64_t other = __shfl_xor_sync(kFullWarp, value, offset);
    value = other > value ? other : value;
  }
  if (lane == 0) scratch.warp_max[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = scratch.warp_max[lane];
    for (int offset = 16; offset > 0; offset /= 2) {
      const uint64_t other = __shfl_xor_sync(kFullWarp, value, offset);
      value = other > value ? other : value;
    }
    if (lane == 0) scratch.block_max = value;
  }
  __syncthreads();
  return scratch.block_max;
}

// The sum of `value` over the block in one fixed tree: halving distances within each warp, then
// the same over the warps' sums in warp 0. The order depends on the block size alone.
__device__ float block_sum(float value, BlockScratch& scratch) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(kFullWarp, value, offset);
  if (lane == 0) scratch.warp_sum[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = scratch.warp_sum[lane];
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(kFullWarp, value, offset);
    if (lane == 0) scratch.block_sum = value;
  }
  __syncthreads();
  return scratch.block_sum;
}

// A token as a search sees it; weight 0 leaves it out.
struct Member {
  uint64_t key;
  uint32_t weight;
};

struct KeySearch {
  bool is_found;
  uint64_t key;
};

// The largest key K such that the members with key >= K together weigh at least `need`, where
// need = need_for(total weight of all members) >= 1; not found when even the total falls short.
// K is always a member's key. Each pass buckets, by their next 8 bits, the members whose key
// matches the bits fixed so far, then takes the largest digit whose cumulative weight (members
// already above, then buckets from the top down) reaches the need. A bucket holding one member
// ends the search early: that member is the answer. Results do not depend on the order in which
// members are visited or gathered: only integer sums, counts and maxima are taken over them.
template <class MemberOf, class NeedFor>
__device__ KeySearch largest_key_reaching(int n_vocab, const MemberOf& member_of, const NeedFor& need_for,
                                          BlockScratch& scratch) {
  const int lane = int(threadIdx.x) % 32;
  const int copy_offset = (lane % kHistogramCopies) * kCopyStride;
  bool is_listed = false;     // every member matching the prefix is in the list
  bool is_gathering = false;  // this pass fills the list
  const auto for_each_member = [&](const auto& visit) {
    if (is_listed) {
      for (int i = int(threadIdx.x); i < int(scratch.list_size); i += kThreads)
        visit(Member{scratch.list_keys[i], scratch.list_weights[i]});
    } else {
      for (int id = int(threadIdx.x); id < n_vocab; id += kThreads) visit(member_of(id));
    }
  };
  uint64_t prefix = 0;  // the digits fixed so far, in place; the bits below them are 0
  uint64_t above = 0;   // weight of the members whose fixed digits exceed the prefix
  uint64_t need = 0;
  int shift = kFirstShift;
  for (;; shift -= kDigitBits) {
    const uint64_t fixed_mask = shift == kFirstShift ? 0 : ~uint64_t{0} << (shift + kDigitBits);
    for (int i = int(threadIdx.x); i < kHistogramCopies * kCopyStride; i += kThreads) {
      scratch.bucket_weight[i] = 0;
      scratch.bucket_count[i] = 0;
    }
    if (is_gathering && threadIdx.x == 0) scratch.list_size = 0;
    __syncthreads();
    for_each_member([&](const Member& member) {
      if (member.weight == 0 || (member.key & fixed_mask) != prefix) return;
      const int digit = int(member.key >> shift) & (kBuckets - 1);
      atomicAdd(&scratch.bucket_weight[copy_offset + digit], member.weight);
      atomicAdd(&scratch.bucket_count[copy_offset + digit], 1u);
      if (is_gathering) {
        const unsigned slot = atomicAdd(&scratch.list_size, 1u);
        scratch.list_keys[slot] = member.key;
        scratch.list_weights[slot] = member.weight;
      }
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds digits 255 - 8l down to 248 - 8l, so lane order is rank order.
      uint32_t weights[kBucketsPerLane];  // every total fits 32 bits (see kMassScale)
      uint64_t lane_weight = 0;
      for (int j = 0; j < kBucketsPerLane; ++j) {
        const int digit = kBuckets - 1 - lane * kBucketsPerLane - j;
        weights[j] = 0;
        for (int copy = 0; copy < kHistogramCopies; ++copy) weights[j] += scratch.bucket_weight[copy * kCopyStride + digit];
        lane_weight += weights[j];
      }
      uint64_t weight_through_lane = lane_weight;
      for (int offset = 1; offset < 32; offset *= 2) {
        const uint64_t lower_lanes = __shfl_up_sync(kFullWarp, weight_through_lane, offset);
        if (lane >= offset) weight_through_lane += lower_lanes;
      }
      if (shift == kFirstShift) need = need_for(__shfl_sync(kFullWarp, weight_through_lane, 31));
      uint64_t cumulative = above + (weight_through_lane - lane_weight);
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
        scratch.digit_count = 0;
        for (int copy = 0; copy < kHistogramCopies; ++copy) scratch.digit_count += scratch.bucket_count[copy * kCopyStride + digit];
        scratch.above = cumulative;
      }
    }
    __syncthreads();
    // Past the first pass a digit is always found: the chosen bucket's weight is exactly the sum
    // of its sub-buckets'.
    if (!scratch.is_found) return {false, 0};
    need = scratch.need;
    above = scratch.above;
    prefix |= uint64_t(scratch.digit) << shift;
    is_listed = is_listed || is_gathering;
    is_gathering = !is_listed && scratch.digit_count <= kListCapacity;
    if (shift == 0 || scratch.digit_count == 1) break;
  }
  if (shift > 0) {
    const uint64_t fixed_mask = ~uint64_t{0} << shift;
    uint64_t key = 0;
    for_each_member([&](const Member& member) {
      if (member.weight != 0 && (member.key & fixed_mask) == prefix) key = member.key;
    });
    prefix = block_max(key, scratch);
  }
  return {true, prefix};
}

// Logits as the CPU sampler ranks them: NaN as -inf, then divided by the temperature.
struct ScaledRow {
  const float* logits;
  float temperature;

  __device__ float value(int id) const {
    const float logit = logits[id];
    return (isnan(logit) ? -INFINITY : logit) / temperature;
  }
};

// The top-k candidates and their unnormalized softmax weights.
struct Candidates {
  ScaledRow row;
  uint64_t floor;  // the k-th best key; 0 makes every token a candidate
  float max_value;

  // exp(value - max value) for a candidate, 0 for any other token.
  __device__ float weight(int id) const {
    const float value = row.value(id);
    return rank_key(value, id) >= floor ? expf(value - max_value) : 0.0f;
  }
};

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* __restrict__ logits, int n_vocab, const GpuSamplingRow* __restrict__ rows,
                       int32_t* __restrict__ ids) {
  __shared__ BlockScratch scratch;
  const GpuSamplingRow params = rows[blockIdx.x];
  if (!(params.temperature > 0.0f)) return;
  const ScaledRow row{logits + int64_t(blockIdx.x) * n_vocab, params.temperature};

  // The best-ranked token is a candidate whatever top_k is. When it is not finite (all -inf, or
  // some +inf) there is no distribution, and the CPU returns that token.
  uint64_t best_key = 0;
  for (int id = int(threadIdx.x); id < n_vocab; id += kThreads) {
    const uint64_t key = rank_key(row.value(id), id);
    best_key = key > best_key ? key : best_key;
  }
  best_key = block_max(best_key, scratch);
  const int best_id = id_of(best_key);
  const float max_value = row.value(best_id);
  if (!isfinite(max_value)) {
    if (threadIdx.x == 0) ids[blockIdx.x] = best_id;
    return;
  }

  // Top-k: the candidates are the tokens whose key is at least the k-th largest.
  uint64_t candidate_floor = 0;
  if (params.top_k > 0 && params.top_k < n_vocab) {
    const auto every_token = [&](int id) { return Member{rank_key(row.value(id), id), 1}; };
    const auto k = uint64_t(params.top_k);
    candidate_floor = largest_key_reaching(n_vocab, every_token, [k](uint64_t) { return k; }, scratch).key;
  }
  const Candidates candidates{row, candidate_floor, max_value};

  // Softmax denominator: each thread's tokens in increasing id, then block_sum's fixed tree.
  float exp_sum = 0.0f;
  for (int id = int(threadIdx.x); id < n_vocab; id += kThreads) exp_sum += candidates.weight(id);
  exp_sum = block_sum(exp_sum, scratch);

  // From here tokens rank by probability, as on the CPU: tokens whose probabilities round equal
  // rank by id even where their values differ.
  const auto ranked_by_probability = [&](int id) {
    const float probability = candidates.weight(id) / exp_sum;
    return Member{rank_key(probability, id), __float2uint_rn(probability * kMassScale)};
  };

  // Top-p: the kept tokens are the shortest rank prefix whose mass reaches top_p; every
  // candidate when even their total falls short (rounding), as on the CPU.
  uint64_t kept_floor = 0;
  if (params.top_p < 1.0f) {
    const uint64_t need = max(1u, __float2uint_ru(fmaxf(params.top_p, 0.0f) * kMassScale));
    const KeySearch cut = largest_key_reaching(n_vocab, ranked_by_probability, [need](uint64_t) { return need; }, scratch);
    if (cut.is_found) kept_floor = cut.key;
  }
  // Min-p: keep probabilities of at least min_p * the best one; the best token always stays.
  if (params.min_p > 0.0f) {
    const float best_probability = candidates.weight(best_id) / exp_sum;
    const float threshold = params.min_p * best_probability;
    // min_p > 1 keeps the best token alone: the largest key of any positive mass.
    const uint64_t min_p_floor =
        threshold <= best_probability
            ? floor_key(threshold)
            : largest_key_reaching(n_vocab, ranked_by_probability, [](uint64_t) { return uint64_t{1}; }, scratch).key;
    kept_floor = min_p_floor > kept_floor ? min_p_floor : kept_floor;
  }

  // The draw, as the CPU's walk: the first kept token in rank order whose cumulative mass passes
  // target = u * kept mass. u is a multiple of 2^-24, so the target is exact, and it is below the
  // kept mass (at least the best token's, 2^31 / exp_sum >= 1), so a token is always found.
  const auto kept = [&](int id) {
    Member member = ranked_by_probability(id);
    if (member.key < kept_floor) member.weight = 0;
    return member;
  };
  const auto u_bits = static_cast<uint64_t>(philox_uniform(params.seed, params.position) * 0x1p24f);
  const auto past_target = [u_bits](uint64_t kept_mass) { return ((kept_mass * u_bits) >> 24) + 1; };
  const KeySearch drawn = largest_key_reaching(n_vocab, kept, past_target, scratch);
  if (threadIdx.x == 0) ids[blockIdx.x] = id_of(drawn.key);
}

}  // namespace

void sample_rows_f32(const float* logits, int64_t n_rows, int64_t n_vocab, const GpuSamplingRow* rows, int32_t* ids,
                     cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_rows < (int64_t(1) << 31), "sample_rows_f32: bad row count");
  // Up to 2^30 tokens the best one's mass, 2^31 / exp_sum, is at least 1 (and ids fit an int).
  TF_CUDA_REQUIRE(n_vocab > 0 && n_vocab <= (int64_t(1) << 30), "sample_rows_f32: bad vocabulary size");
  if (n_rows == 0) return;
  sample_rows_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, int(n_vocab), rows, ids);
  TF_CUDA_CHECK_LAUNCH("sample_rows_kernel");
}

}  // namespace tf::cuda
