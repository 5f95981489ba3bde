// Resumed = fresh: a reply whose prompt prefix came from the prefix cache equals the reply of a cold
// prefill, bitwise, greedy and sampled, drafted and not, alone and among other lanes; and the KV
// pool's bookkeeping (references, promises, least-recently-used eviction) underneath it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "core/sha256.h"
#include "engine/engine.h"
#include "engine/slot_file.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "runtime/recurrent_checkpoints.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"
#include "support/hybrid_runs.h"
#include "support/expect_error.h"
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

// A restore whose first block is already cached, least recently used, with no block free: the
// blocks it inserts after it must evict other prefixes, not that one (else the restored run is cut
// at its head and nothing of it can be adopted, though the restore counted it).
TEST(KvPool, ARestoredBlockAlreadyCachedIsNotEvictedByTheRestBeingInserted) {
  KvCache kv = small_pool(3);
  const BlockKey root = root_block_key("m", "");
  const auto keys = block_keys(root, tokens_from(0, 32), 32, 16);
  for (const auto& first : {keys[0], block_keys(root, tokens_from(500, 16), 16, 16)[0],
                            block_keys(root, tokens_from(900, 16), 16, 16)[0]}) {
    const int32_t lane = kv.lane_open();  // cached in this order: keys[0] is the least recently used
    ASSERT_TRUE(kv.lane_reserve(lane, 16));
    ASSERT_TRUE(kv.publish(lane, 0, first, {}));
    kv.lane_close(lane);
  }
  ASSERT_EQ(kv.stats().free, 0);
  EXPECT_TRUE(kv.insert_cached(keys[0], {}, {}));
  EXPECT_TRUE(kv.insert_cached(keys[1], {}, {}));
  EXPECT_EQ(kv.n_cached_prefix(keys), 2) << "the restored run keeps its first block";
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
TEST(PromptCache, ResumedLaneDraftsAsAFreshOne) {
  test::expect_resumed_lane_drafts_as_a_fresh_one(load_model(test::fixture_model("qwen3-tiny-a"), {}),
                                                  test::source_path("tests/fixtures/drafter/tiny-a-drafter"));
}

// The cache's behaviours that a dense model and a hybrid (resuming at recurrent checkpoints) share.
class PromptCacheOn : public ::testing::TestWithParam<const char*> {
 protected:
  std::shared_ptr<Model> model() const { return load_model(test::fixture_model(GetParam()), {}); }
};

TEST_P(PromptCacheOn, MultiTurnReusesPromptAndReplyAndEqualsCold) { test::expect_multi_turn_equals_cold(model()); }
TEST_P(PromptCacheOn, SaltsKeepTenantsApartAndOptOutNeitherReadsNorFeeds) {
  test::expect_salts_and_opt_out_apart(model());
}
TEST_P(PromptCacheOn, EvictionUnderPressureNeverTouchesALiveLane) {
  test::expect_eviction_never_touches_a_live_lane(model());
}
TEST_P(PromptCacheOn, RestoredSlotContinuesExactly) {
  test::expect_restored_slot_continues_exactly(
      model(), std::string(TF_BINARY_DIR) + "/restored-slot-test-" + GetParam() + ".tfslot");
}

TEST_P(PromptCacheOn, RestoredSlotServesItsPromptAgain) {
  test::expect_restored_slot_serves_its_prompt_again(
      model(), std::string(TF_BINARY_DIR) + "/prompt-again-test-" + GetParam() + ".tfslot");
}

INSTANTIATE_TEST_SUITE_P(DenseAndHybrid, PromptCacheOn, ::testing::Values("qwen3-tiny-b", "qwen3.5-tiny-b"),
                         [](const auto& info) {
                           return std::string(std::string(info.param).find("qwen3.5") == 0 ? "Hybrid" : "Dense");
                         });

// ---- Hybrids: the recurrent state at block boundaries ---------------------------------------------

TEST(RecurrentCheckpoints, KeepsWithinTheBudgetDroppingTheLeastRecentlyUsed) {
  const BlockKey root = root_block_key("m", "");
  const auto keys = block_keys(root, tokens_from(1, 64), 64, 16);
  RecurrentCheckpoints checkpoints(250);
  EXPECT_TRUE(checkpoints.put(keys[0], std::vector<uint8_t>(100, 1)));
  EXPECT_TRUE(checkpoints.put(keys[1], std::vector<uint8_t>(100, 2)));
  ASSERT_NE(checkpoints.find(keys[0]), nullptr);  // now the most recently used
  EXPECT_TRUE(checkpoints.put(keys[2], std::vector<uint8_t>(100, 3)));
  EXPECT_TRUE(checkpoints.contains(keys[0]));
  EXPECT_FALSE(checkpoints.contains(keys[1])) << "the least recently used goes first";
  EXPECT_EQ(checkpoints.stats().bytes, 200);
  EXPECT_EQ(checkpoints.stats().evictions, 1);
  EXPECT_FALSE(checkpoints.put(keys[3], std::vector<uint8_t>(300, 4))) << "larger than the whole budget";
  EXPECT_EQ(checkpoints.resumable_prefix(keys, 4), 3);
  EXPECT_EQ(checkpoints.resumable_prefix(keys, 2), 1);
  checkpoints.forget(keys[0]);
  EXPECT_EQ(checkpoints.resumable_prefix(keys, 2), 0);
  EXPECT_EQ(checkpoints.stats().bytes, 100);
}

std::shared_ptr<Model> hybrid_b() { return load_model(test::fixture_model("qwen3.5-tiny-b"), {}); }

// Rows [from, to) of ids as one pass of `lane` (the chain continues the lane's committed positions).
void prefill_rows(Model& model, KvCache& kv, int32_t lane, const std::vector<int32_t>& ids, int64_t from, int64_t to,
                  std::vector<float>* logits) {
  Batch batch;
  for (int64_t p = from; p < to; ++p)
    batch.rows.push_back({ids[size_t(p)], int32_t(p), lane, p == from ? -1 : int32_t(p - from - 1),
                          kv.slot(lane, p), true});
  std::vector<float> out(size_t(to - from) * size_t(model.config().vocab_size));
  model.forward(batch, kv, out.data());
  if (logits) logits->insert(logits->end(), out.begin(), out.end());
}

// The state a lane reads at a block boundary, whatever passes brought it there, is the state of
// that prefix computed alone; a lane started from it (with the prefix's K/V) continues with the
// logits of a cold prefill, bitwise.
TEST(HybridCheckpoint, StateAtABoundaryIsThePrefixsAndResumesBitwise) {
  auto model = hybrid_b();
  std::mt19937 rng(3);
  const auto ids = test::random_ids(rng, 60, model->config().vocab_size);
  const int64_t n_bytes = model->recurrent_state_bytes();
  ASSERT_GT(n_bytes, 0);
  ASSERT_FALSE(model->recurrent_state_format().empty());

  KvCache chunked = make_kv_cache(*model, 8);
  const int32_t a = chunked.lane_open();
  chunked.lane_reserve(a, 60);
  std::vector<float> cold_logits;
  prefill_rows(*model, chunked, a, ids, 0, 20, &cold_logits);
  prefill_rows(*model, chunked, a, ids, 20, 60, &cold_logits);
  std::vector<uint8_t> at_32(static_cast<size_t>(n_bytes)), at_48(static_cast<size_t>(n_bytes));
  model->read_recurrent_state(chunked, a, 32, at_32.data());
  model->read_recurrent_state(chunked, a, 48, at_48.data());
  EXPECT_NE(at_32, at_48);

  KvCache alone = make_kv_cache(*model, 8);
  const int32_t b = alone.lane_open();
  alone.lane_reserve(b, 32);
  prefill_rows(*model, alone, b, ids, 0, 32, nullptr);
  std::vector<uint8_t> alone_32(static_cast<size_t>(n_bytes));
  model->read_recurrent_state(alone, b, 32, alone_32.data());
  EXPECT_EQ(alone_32, at_32) << "the state at 32 depends on the passes that reached it";

  // Resume at 32 in a third cache: the prefix's K/V, the checkpoint, then the rest as one pass.
  KvCache resumed = make_kv_cache(*model, 8);
  const int32_t c = resumed.lane_open();
  resumed.lane_reserve(c, 60);
  std::vector<uint8_t> kv_bytes(static_cast<size_t>(chunked.storage().bytes_for(32)));
  chunked.storage().read_slots(chunked.slot(a, 0), 32, kv_bytes.data());
  resumed.storage().write_slots(resumed.slot(c, 0), 32, kv_bytes.data());
  model->write_recurrent_state(resumed, c, 32, at_32.data());
  std::vector<float> resumed_logits;
  prefill_rows(*model, resumed, c, ids, 32, 60, &resumed_logits);
  const size_t vocab = size_t(model->config().vocab_size);
  ASSERT_EQ(resumed_logits.size(), 28 * vocab);
  EXPECT_EQ(0, std::memcmp(resumed_logits.data(), cold_logits.data() + 32 * vocab, resumed_logits.size() * sizeof(float)))
      << "logits after a resumed state differ from the cold prefill's";
  std::vector<uint8_t> resumed_48(static_cast<size_t>(n_bytes));
  model->read_recurrent_state(resumed, c, 48, resumed_48.data());
  EXPECT_EQ(resumed_48, at_48);
}

TEST(HybridCheckpoint, AKeptStateIsTheReadStateAndOutlivesLaterPasses) {
  test::expect_kept_state_is_the_read_state(*hybrid_b());
}

TEST(HybridCheckpoint, ReadingBehindTheStateIsAnInternalError) {
  auto model = hybrid_b();
  std::mt19937 rng(4);
  const auto ids = test::random_ids(rng, 40, model->config().vocab_size);
  KvCache kv = make_kv_cache(*model, 4);
  const int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, 40);
  prefill_rows(*model, kv, lane, ids, 0, 20, nullptr);
  prefill_rows(*model, kv, lane, ids, 20, 40, nullptr);
  std::vector<uint8_t> state(static_cast<size_t>(model->recurrent_state_bytes()));
  EXPECT_THROW(model->read_recurrent_state(kv, lane, 16, state.data()), std::exception);
}

// The engine's equalities with a hybrid's cache: every prefix served from a checkpoint, every block
// (1) or every third (3), drafted (n-gram and long-copy proposers) and not.
TEST(HybridPromptCache, ResumedEqualsFreshGreedy) { test::expect_resumed_equals_fresh(hybrid_b(), false, false, 11, 1); }
TEST(HybridPromptCache, ResumedEqualsFreshSampledDrafted) {
  test::expect_resumed_equals_fresh(hybrid_b(), true, true, 12, 1);
}
TEST(HybridPromptCache, ResumedEqualsFreshDraftedGreedyEveryThirdBlock) {
  test::expect_resumed_equals_fresh(hybrid_b(), false, true, 13, 3);
}

// Checkpoints as sparse as a large hybrid's (every 64 blocks): only the prompt's last block before
// its last token and the reply's last block have a state.
TEST(HybridPromptCache, RestoredSlotServesItsPromptAgainWithSparseCheckpoints) {
  test::expect_restored_slot_serves_its_prompt_again(
      hybrid_b(), std::string(TF_BINARY_DIR) + "/prompt-again-sparse-test.tfslot", 64);
}

// ---- Saved-slot files -----------------------------------------------------------------------------

// Rewrites a slot file's header and its closing SHA-256: the file an older or a newer writer made.
void rewrite_slot_header(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr size_t header_at = 7 + 8;  // "TFSLOT\n", the header's length
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data() + 7, 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(header_at, size_t(header_size)));
  edit(header);
  const std::string text = header.dump();
  const uint64_t text_size = text.size();
  std::string out = bytes.substr(0, 7);
  out.append(reinterpret_cast<const char*>(&text_size), 8);
  out += text;
  out.append(bytes, header_at + size_t(header_size), bytes.size() - header_at - size_t(header_size) - 32);
  Sha256 hasher;
  hasher.update(out);
  const auto digest = hasher.digest();
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(out.data(), std::streamsize(out.size()));
}

// A hybrid's slot holds the states at its prompt's last checkpoint before its last token and at its
// last block, each its prefix's cold prefill's, bitwise. A version-2 file (the last state only)
// restores as it did: the next turn resumes from that state and equals a cold run.
TEST(SavedSlot, AHybridsStatesAreColdPrefillsAndAVersion2FileRestoresAsBefore) {
  auto model = hybrid_b();
  const std::string file = std::string(TF_BINARY_DIR) + "/version-2-test.tfslot";
  const ModelIdentity identity{"fixture", {{"config.json", "0123"}}};
  EngineOptions options;
  options.n_ctx = 300;
  options.n_parallel = 2;
  options.model_id = "fixture";
  GenerationRequest first = test::random_requests(1, false, model->config().vocab_size, 78, 60, 10)[0];
  first.prompt.resize(60, 5);
  first.max_tokens = 30;
  SlotSnapshot saved;
  {
    Engine engine(options, model, nullptr);
    test::EngineRun run;
    test::submit_and_collect(engine, {first}, &run);
    first.prompt.insert(first.prompt.end(), run.replies[0].tokens.begin(), run.replies[0].tokens.end());
    saved = engine.save_slot(0);
  }
  ASSERT_EQ(saved.recurrent.size(), 2u) << "the prompt's state and the last";
  EXPECT_EQ(saved.recurrent[0].n_blocks, (60 - 1) / kKvBlockSize);
  EXPECT_EQ(saved.recurrent[1].n_blocks, saved.n_blocks);
  for (const SlotRecurrentState& state : saved.recurrent) {  // each is that prefix's cold prefill's
    const int64_t n_positions = state.n_blocks * kKvBlockSize;
    KvCache alone = make_kv_cache(*model, 8);
    const int32_t lane = alone.lane_open();
    alone.lane_reserve(lane, n_positions);
    prefill_rows(*model, alone, lane, first.prompt, 0, n_positions, nullptr);
    std::vector<uint8_t> cold_state(static_cast<size_t>(model->recurrent_state_bytes()));
    model->read_recurrent_state(alone, lane, n_positions, cold_state.data());
    EXPECT_EQ(state.bytes, cold_state) << "the saved state at " << n_positions;
  }
  saved.recurrent.erase(saved.recurrent.begin());  // what a version-2 writer kept
  write_slot_file(file, saved, identity);
  rewrite_slot_header(file, [](nlohmann::json& header) {
    header["version"] = 2;
    header.erase("n_prompt");
    header.erase("recurrent_blocks");
  });
  const SlotSnapshot read = read_slot_file(file, identity);
  ASSERT_EQ(read.recurrent.size(), 1u);
  EXPECT_EQ(read.recurrent[0].n_blocks, saved.n_blocks);
  EXPECT_EQ(read.recurrent[0].bytes, saved.recurrent[0].bytes);
  EXPECT_EQ(read.n_prompt, int64_t(read.tokens.size()));

  GenerationRequest next = first;
  for (int i = 0; i < 7; ++i) next.prompt.push_back(int32_t(3 + i));
  const test::EngineRun fresh = test::run_engine(model, {test::cold(next)}, options, false);
  Engine restored(options, model, nullptr);
  const int64_t n_restored = restored.restore_slot(1, read);
  EXPECT_EQ(n_restored, saved.n_blocks * kKvBlockSize);
  test::EngineRun resumed;
  test::submit_and_collect(restored, {next}, &resumed);
  test::expect_same_tokens(fresh.replies, resumed.replies, "a version-2 slot");
  EXPECT_EQ(resumed.replies[0].final_update.timings.cache_n, n_restored);
  std::remove(file.c_str());
}

TEST(SavedSlot, AFileOfAVersionItDoesNotReadIsRefused) {
  const std::string file = std::string(TF_BINARY_DIR) + "/unknown-version-test.tfslot";
  const ModelIdentity identity{"fixture", {{"config.json", "0123"}}};
  SlotSnapshot snapshot;
  snapshot.tokens = tokens_from(1, 20);
  snapshot.n_prompt = 20;
  snapshot.kv_format = "f32 2x64";
  snapshot.block_size = 16;
  for (int version : {1, kSlotFileVersion + 1}) {
    write_slot_file(file, snapshot, identity);
    rewrite_slot_header(file, [&](nlohmann::json& header) { header["version"] = version; });
    test::expect_error_naming([&] { read_slot_file(file, identity); },
                              {"format version " + std::to_string(version), "reads versions 2 to 3"});
  }
  std::remove(file.c_str());
}

// What a save killed before its rename leaves (F.tmp-XXXXXX for a slot file F) is removed; files of
// other names, folders and links are left alone.
TEST(SavedSlot, StaleTemporariesAreRemovedAndNothingElse) {
  const std::filesystem::path dir = std::string(TF_BINARY_DIR) + "/stale-temporaries-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  const std::vector<std::string> stale = {"chat.tfslot.tmp-Ab12Cd", "x_y-z.tfslot.tmp-000000"};
  const std::vector<std::string> kept = {"chat.tfslot", "notes.txt", "chat.tfslot.tmp-Ab12C", "chat.tfslot.tmp-Ab12Cde",
                                         "chat.tmp-Ab12Cd", "a.b.tfslot.tmp-Ab12Cd", "chat.tfslot.tmp-Ab12Cd.keep"};
  for (const auto& names : {stale, kept})
    for (const std::string& name : names) std::ofstream(dir / name) << "x";
  std::filesystem::create_directory(dir / "folder.tfslot.tmp-Ab12Cd");
  std::filesystem::create_symlink(dir / "notes.txt", dir / "link.tfslot.tmp-Ab12Cd");
  EXPECT_EQ(remove_stale_slot_temporaries(dir.string(), "[A-Za-z0-9_-]{1,64}\\.tfslot"), 2);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) left.push_back(entry.path().filename().string());
  std::vector<std::string> expected = kept;
  expected.insert(expected.end(), {"folder.tfslot.tmp-Ab12Cd", "link.tfslot.tmp-Ab12Cd"});
  std::sort(left.begin(), left.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(left, expected);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tf
