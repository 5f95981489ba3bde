// Resumed = fresh: a reply whose prompt prefix came from the prefix cache equals the reply of a cold
// prefill, bitwise, greedy and sampled, drafted and not, alone and among other lanes; and the KV
// pool's bookkeeping (references, promises, least-recently-used eviction) underneath it.
#include <gtest/gtest.h>

#include "backends/backends.h"
#include "engine/engine.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "support/fixtures.h"
#include "support/resumed.h"

namespace tf {
namespace {

// ---- The pool and its prefix index -------------------------------------------------------------

// Storage that holds nothing: the pool's arithmetic alone.
class NoStorage : public KvStorage {
 public:
  explicit NoStorage(int64_t n) : n_(n) {}
  int64_t n_slots() const override { return n_; }
  void copy_slot(int32_t, int32_t) override {}
  std::string format() const override { return "none"; }
  int64_t bytes_for(int64_t) const override { return 0; }
  void read_slots(int32_t, int64_t, uint8_t*) const override {}
  void write_slots(int32_t, int64_t, const uint8_t*) override {}

 private:
  int64_t n_;
};

KvCache small_pool(int64_t n_blocks) { return KvCache(std::make_unique<NoStorage>(n_blocks * 16), n_blocks); }

std::vector<int32_t> tokens_from(int32_t first, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = first + int32_t(i);
  return t;
}

TEST(KvPool, KeysChainThePrefixAndTheSalt) {
  const BlockKey root = root_block_key("m", "");
  const auto a = block_keys(root, tokens_from(0, 48), 48, 16);
  auto changed = tokens_from(0, 48);
  changed[3] = 999;  // only the first block's tokens differ, yet every key after it changes
  const auto b = block_keys(root, changed, 48, 16);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(a[i] == b[i]) << i;
  const auto salted = block_keys(root_block_key("m", "tenant"), tokens_from(0, 48), 48, 16);
  EXPECT_FALSE(a[0] == salted[0]);
  EXPECT_FALSE(root_block_key("ab", "c") == root_block_key("a", "bc"));
  EXPECT_EQ(block_keys(root, tokens_from(0, 47), 47, 16).size(), 2u) << "a partial block has no key";
}

TEST(KvPool, PublishedBlocksAreSharedByReferenceAndOutliveTheirLane) {
  KvCache kv = small_pool(8);
  const auto keys = block_keys(root_block_key("m", ""), tokens_from(0, 64), 64, 16);
  const int32_t a = kv.lane_open();
  ASSERT_TRUE(kv.lane_promise(a, 64));
  ASSERT_TRUE(kv.lane_reserve(a, 64));
  for (int64_t b = 0; b < 3; ++b) EXPECT_TRUE(kv.publish(a, b, keys[size_t(b)], {}));
  EXPECT_EQ(kv.n_cached_prefix(keys), 3);
  const int32_t lane_b = kv.lane_open();
  kv.lane_adopt(lane_b, keys, 2);
  EXPECT_EQ(kv.slot(lane_b, 17), kv.slot(a, 17)) << "an adopted block is the same physical block";
  kv.lane_close(a);
  KvPoolStats stats = kv.stats();
  EXPECT_EQ(stats.in_use, 2);  // lane b's two adopted blocks
  EXPECT_EQ(stats.cached, 1);  // block 2, published and held by nobody
  EXPECT_EQ(stats.free, 5);    // a's unpublished block and the rest
  kv.lane_close(lane_b);
  EXPECT_EQ(kv.stats().cached, 3);
  EXPECT_EQ(kv.n_cached_prefix(keys), 3);
}

TEST(KvPool, EvictsLeastRecentlyUsedAndNeverAHeldOrPromisedBlock) {
  KvCache kv = small_pool(4);
  const BlockKey root = root_block_key("m", "");
  std::vector<std::vector<BlockKey>> keys;
  for (int32_t i = 0; i < 4; ++i) {  // four one-block prefixes, cached in order 0, 1, 2, 3
    keys.push_back(block_keys(root, tokens_from(100 * i, 16), 16, 16));
    const int32_t lane = kv.lane_open();
    ASSERT_TRUE(kv.lane_reserve(lane, 16));
    ASSERT_TRUE(kv.publish(lane, 0, keys.back()[0], {}));
    kv.lane_close(lane);
  }
  EXPECT_EQ(kv.stats().cached, 4);
  // Using prefix 0 again makes it the most recently used.
  int32_t user = kv.lane_open();
  kv.lane_adopt(user, keys[0], 1);
  kv.lane_close(user);
  // A lane promised two blocks, holding prefix 2: two evictions, of 1 and 3 (0 was used later).
  const int32_t holder = kv.lane_open();
  kv.lane_adopt(holder, keys[2], 1);
  ASSERT_TRUE(kv.lane_promise(holder, 48));
  EXPECT_EQ(kv.n_free_blocks(), 1) << "cached 0, 1 and 3, less the two blocks promised";
  ASSERT_TRUE(kv.lane_reserve(holder, 48));
  EXPECT_EQ(kv.stats().evictions, 2);
  EXPECT_EQ(kv.n_cached_prefix(keys[0]), 1);
  EXPECT_EQ(kv.n_cached_prefix(keys[1]), 0);
  EXPECT_EQ(kv.n_cached_prefix(keys[3]), 0);
  EXPECT_EQ(kv.n_cached_prefix(keys[2]), 1) << "a held block is never evicted";
  // The last cached block may go to another lane, but nothing more: the rest is held.
  const int32_t other = kv.lane_open();
  EXPECT_FALSE(kv.lane_promise(other, 32));
  EXPECT_TRUE(kv.lane_promise(other, 16));
  EXPECT_FALSE(kv.lane_reserve(other, 32));
  EXPECT_TRUE(kv.lane_reserve(other, 16));
  EXPECT_EQ(kv.n_cached_prefix(keys[2]), 1);
}

TEST(KvPool, PromisesHoldWhateverOtherLanesDraw) {
  KvCache kv = small_pool(6);
  const int32_t a = kv.lane_open();
  ASSERT_TRUE(kv.lane_promise(a, 64));  // four blocks, none drawn yet
  const int32_t b = kv.lane_open();
  EXPECT_FALSE(kv.lane_reserve(b, 48)) << "only two blocks are not promised";
  EXPECT_TRUE(kv.lane_reserve(b, 32));
  for (int64_t n = 16; n <= 64; n += 16) EXPECT_TRUE(kv.lane_reserve(a, n));
  EXPECT_EQ(kv.n_free_blocks(), 0);
}

// ---- Resumed = fresh through the engine (tests/support/resumed.h, shared with the GPU suite) ----

std::shared_ptr<Model> tiny_b() { return load_model(test::fixture_model("qwen3-tiny-b"), {}); }

TEST(PromptCache, ResumedEqualsFreshGreedy) { test::expect_resumed_equals_fresh(tiny_b(), false, false, 1); }
TEST(PromptCache, ResumedEqualsFreshSampled) { test::expect_resumed_equals_fresh(tiny_b(), true, false, 2); }
TEST(PromptCache, ResumedEqualsFreshDraftedGreedy) { test::expect_resumed_equals_fresh(tiny_b(), false, true, 3); }
TEST(PromptCache, ResumedEqualsFreshDraftedSampled) { test::expect_resumed_equals_fresh(tiny_b(), true, true, 4); }
TEST(PromptCache, MultiTurnReusesPromptAndReplyAndEqualsCold) { test::expect_multi_turn_equals_cold(tiny_b()); }
TEST(PromptCache, SaltsKeepTenantsApartAndOptOutNeitherReadsNorFeeds) {
  test::expect_salts_and_opt_out_apart(tiny_b());
}
TEST(PromptCache, EvictionUnderPressureNeverTouchesALiveLane) {
  test::expect_eviction_never_touches_a_live_lane(tiny_b());
}
TEST(PromptCache, ResumedLaneDraftsAsAFreshOne) {
  test::expect_resumed_lane_drafts_as_a_fresh_one(load_model(test::fixture_model("qwen3-tiny-a"), {}),
                                                  test::source_path("tests/fixtures/drafter/tiny-a-drafter"));
}
TEST(PromptCache, RestoredSlotContinuesExactly) {
  test::expect_restored_slot_continues_exactly(tiny_b(), std::string(TF_BINARY_DIR) + "/restored-slot-test.tfslot");
}

}  // namespace
}  // namespace tf
