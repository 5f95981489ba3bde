// Slots: the n_parallel places requests run in. An idle slot remembers the sequence its last
// request committed; saving writes that sequence with the K/V of its longest cached prefix, and
// restoring puts the blocks back into the prefix cache, so the next request that starts with those
// tokens adopts them exactly as if the server had never stopped (resumed = fresh).
#include <algorithm>
#include <future>

#include "core/error.h"
#include "engine/engine_impl.h"

namespace tf {

std::string Engine::Impl::kv_form() const {
  return kv.storage().format() + (options.numerics.empty() ? "" : ", " + options.numerics);
}

bool Engine::Impl::is_waiting_for_its_slot(const GenerationRequest& request) const {
  return request.slot != GenerationRequest::kAnySlot && slot_records.at(size_t(request.slot)).info.is_processing;
}

// The lane's pinned slot; else the first idle slot no queued request is pinned to, else the first
// idle slot (a request ahead of the pinned one in the queue may take it: it came first).
int32_t Engine::Impl::take_slot(const Lane& lane) {
  std::vector<bool> is_wanted(slot_records.size(), false);
  for (const PendingRequest& waiting : pending)
    if (waiting.request.slot != GenerationRequest::kAnySlot) is_wanted[size_t(waiting.request.slot)] = true;
  int32_t id = lane.request.slot;
  for (size_t i = 0; id == GenerationRequest::kAnySlot && i < slot_records.size(); ++i)
    if (!slot_records[i].info.is_processing && !is_wanted[i]) id = int32_t(i);
  for (size_t i = 0; id == GenerationRequest::kAnySlot && i < slot_records.size(); ++i)
    if (!slot_records[i].info.is_processing) id = int32_t(i);
  if (id == GenerationRequest::kAnySlot) fail_internal("a lane was admitted with every slot busy");
  SlotRecord& record = slot_records.at(size_t(id));
  if (record.info.is_processing) fail_internal("a lane was admitted into its pinned slot while it was busy");
  record.info.is_processing = true;
  record.info.request_id = lane.id;
  record.info.n_prompt = lane.n_prompt;
  record.info.n_prompt_cached = lane.n_cached;
  record.info.n_tokens = 0;
  record.info.timings = ReplyTimings{};  // the run's own, round by round (Impl::run)
  record.tokens.clear();
  return id;
}

void Engine::Impl::leave_slot(const Lane& lane) {
  std::lock_guard<std::mutex> lock(mutex);
  SlotRecord& record = slot_records.at(size_t(lane.slot));
  const int64_t n_known = std::min(lane.n_cached, int64_t(lane.tokens.size()));
  record.tokens.assign(lane.tokens.begin(), lane.tokens.begin() + n_known);
  record.n_prompt = std::min(lane.n_prompt, n_known);
  record.cache_salt = lane.request.cache_salt;
  record.info.is_processing = false;
  record.info.n_tokens = n_known;
  record.info.timings = lane.timings;
}

void Engine::Impl::run_tasks() {
  std::deque<std::function<void()>> now;
  {
    std::lock_guard<std::mutex> lock(mutex);
    now.swap(tasks);
  }
  for (auto& task : now) task();
}

template <class Result>
Result Engine::Impl::on_engine_thread(std::function<Result()> work) {
  auto done = std::make_shared<std::promise<Result>>();
  std::future<Result> result = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) fail("the server is shutting down");
    tasks.push_back([this, done, work = std::move(work)] {
      try {
        if (stopping) fail("the server is shutting down");
        done->set_value(work());
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
  }
  wake.notify_all();
  return result.get();
}

std::vector<SlotInfo> Engine::slots() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<SlotInfo> out;
  for (const auto& record : impl_->slot_records) out.push_back(record.info);
  for (const PendingRequest& waiting : impl_->pending)
    if (waiting.request.slot != GenerationRequest::kAnySlot) ++out.at(size_t(waiting.request.slot)).n_waiting;
  return out;
}

Engine::Impl::SlotRecord& Engine::Impl::idle_slot(int32_t id) {
  if (id < 0 || id >= int32_t(slot_records.size()))
    fail("there is no slot " + std::to_string(id) + " (slots are 0.." + std::to_string(slot_records.size() - 1) + ")");
  SlotRecord& record = slot_records[size_t(id)];
  if (record.info.is_processing)
    fail("slot " + std::to_string(id) + " is processing a request; try again when it is idle");
  return record;
}

SlotSnapshot Engine::save_slot(int32_t id) {
  Impl& impl = *impl_;
  return impl.on_engine_thread<SlotSnapshot>([&impl, id] {
    SlotSnapshot snapshot;
    {
      std::lock_guard<std::mutex> lock(impl.mutex);
      const Impl::SlotRecord& record = impl.idle_slot(id);
      if (record.tokens.empty()) fail("slot " + std::to_string(id) + " holds no sequence to save");
      snapshot.tokens = record.tokens;
      snapshot.n_prompt = record.n_prompt;
      snapshot.cache_salt = record.cache_salt;
    }
    KvCache& kv = impl.kv;
    const int64_t block_size = kv.block_size();
    snapshot.kv_format = impl.kv_form();
    snapshot.block_size = block_size;
    const BlockKey root = root_block_key(impl.options.model_id, snapshot.cache_salt);
    const auto keys = block_keys(root, snapshot.tokens, int64_t(snapshot.tokens.size()), block_size);
    const int64_t block_bytes = kv.storage().bytes_for(block_size);
    bool has_taps = true;
    for (const BlockKey& key : keys) {
      const int32_t block = kv.cached_block(key);
      if (block < 0) break;  // evicted since: the rest is prefilled again when used
      const size_t offset = snapshot.kv.size();
      snapshot.kv.resize(offset + size_t(block_bytes));
      kv.storage().read_slots(int32_t(block * block_size), block_size, snapshot.kv.data() + offset);
      const std::vector<float>& taps = kv.cached_extras(key);
      if (snapshot.n_blocks == 0) snapshot.tap_width = int64_t(taps.size()) / block_size;
      has_taps = has_taps && !taps.empty() && int64_t(taps.size()) == snapshot.tap_width * block_size;
      snapshot.taps.insert(snapshot.taps.end(), taps.begin(), taps.end());
      ++snapshot.n_blocks;
    }
    if (!has_taps || snapshot.tap_width == 0) {
      snapshot.tap_width = 0;
      snapshot.taps.clear();
    }
    // A recurrent model resumes only where its state was checkpointed: the blocks up to the last
    // checkpoint, and that state (the next turn resumes there), are what is worth saving, with the
    // state at the prompt's last checkpoint before its last token (the same prompt again resumes
    // there; the last one, in the reply, is past it). Two states at most, so the file stays bounded.
    if (impl.model->recurrent_state_bytes() > 0) {
      const int64_t n = impl.checkpoints.resumable_prefix(keys, snapshot.n_blocks);
      const int64_t prompt_blocks = std::max<int64_t>(0, snapshot.n_prompt - 1) / block_size;
      const int64_t n_in_prompt = impl.checkpoints.resumable_prefix(keys, std::min(n, prompt_blocks));
      snapshot.n_blocks = n;
      snapshot.kv.resize(size_t(n * block_bytes));
      if (snapshot.tap_width > 0) snapshot.taps.resize(size_t(n * block_size * snapshot.tap_width));
      snapshot.recurrent_format = impl.model->recurrent_state_format();
      for (int64_t at : {n_in_prompt, n})
        if (at > 0 && (snapshot.recurrent.empty() || snapshot.recurrent.back().n_blocks < at))
          snapshot.recurrent.push_back({at, *impl.checkpoints.find(keys[size_t(at - 1)])});
    }
    return snapshot;
  });
}

int64_t Engine::restore_slot(int32_t id, SlotSnapshot snapshot) {
  Impl& impl = *impl_;
  return impl.on_engine_thread<int64_t>([&impl, id, &snapshot] {
    KvCache& kv = impl.kv;
    {
      std::lock_guard<std::mutex> lock(impl.mutex);
      impl.idle_slot(id);
    }
    for (int32_t token : snapshot.tokens)
      if (token < 0 || token >= impl.model->config().vocab_size)
        fail("the saved slot has token id " + std::to_string(token) + ", outside this model's vocabulary");
    const int64_t block_size = kv.block_size();
    const int64_t block_bytes = kv.storage().bytes_for(block_size);
    const int64_t state_bytes = impl.model->recurrent_state_bytes();
    // States ascending, each of this model's size, within the saved blocks.
    bool same_state_form = snapshot.recurrent_format == impl.model->recurrent_state_format() &&
                           (state_bytes > 0 || snapshot.recurrent.empty());
    for (size_t i = 0; i < snapshot.recurrent.size(); ++i) {
      const SlotRecurrentState& state = snapshot.recurrent[i];
      same_state_form = same_state_form && int64_t(state.bytes.size()) == state_bytes && state.n_blocks >= 1 &&
                        state.n_blocks <= snapshot.n_blocks &&
                        (i == 0 || state.n_blocks > snapshot.recurrent[i - 1].n_blocks);
    }
    // Sizes compared by division: a product of a file's sizes could wrap.
    const bool same_form = snapshot.kv_format == impl.kv_form() && snapshot.block_size == block_size &&
                           snapshot.n_blocks >= 0 && block_bytes > 0 && snapshot.kv.size() % size_t(block_bytes) == 0 &&
                           int64_t(snapshot.kv.size() / size_t(block_bytes)) == snapshot.n_blocks &&
                           (snapshot.tap_width == 0 ||
                            int64_t(snapshot.taps.size()) / block_size / snapshot.tap_width >= snapshot.n_blocks) &&
                           same_state_form;
    // Only whole blocks of this storage's form come back; another form's K/V (another backend)
    // would not be the bits this machine computes, so those positions are prefilled again.
    int64_t n_restored = 0;
    if (same_form && impl.options.prompt_cache) {  // without the prefix cache no lane would read them
      const BlockKey root = root_block_key(impl.options.model_id, snapshot.cache_salt);
      const auto keys = block_keys(root, snapshot.tokens, int64_t(snapshot.tokens.size()), block_size);
      int64_t n = std::min({snapshot.n_blocks, int64_t(keys.size()), kv.n_free_blocks()});
      // A recurrent model resumes only at a state: blocks past the last one that fits are of no use.
      if (state_bytes > 0) {
        int64_t n_resumable = 0;
        for (const SlotRecurrentState& state : snapshot.recurrent)
          if (state.n_blocks <= n) n_resumable = state.n_blocks;
        n = n_resumable;
      }
      std::vector<uint8_t> bytes(static_cast<size_t>(block_bytes));
      for (int64_t b = 0; b < n; ++b) {
        std::copy_n(snapshot.kv.data() + b * block_bytes, block_bytes, bytes.data());
        std::vector<float> taps;
        if (snapshot.tap_width > 0) {
          const auto first = snapshot.taps.begin() + b * block_size * snapshot.tap_width;
          taps.assign(first, first + block_size * snapshot.tap_width);
        }
        if (!kv.insert_cached(keys[size_t(b)], bytes, std::move(taps))) break;
        n_restored += block_size;
      }
      // A recurrent model resumes from a state whose blocks all came back: positions up to the
      // furthest one the checkpoints kept are restored, none without one.
      if (state_bytes > 0) {
        const int64_t n_blocks_restored = n_restored / block_size;
        n_restored = 0;
        for (SlotRecurrentState& state : snapshot.recurrent)
          if (state.n_blocks <= n_blocks_restored &&
              impl.checkpoints.put(keys[size_t(state.n_blocks - 1)], std::move(state.bytes)))
            n_restored = state.n_blocks * block_size;
      }
    }
    std::lock_guard<std::mutex> lock(impl.mutex);
    Impl::SlotRecord& record = impl.slot_records[size_t(id)];
    record.tokens = std::move(snapshot.tokens);
    record.n_prompt = std::clamp<int64_t>(snapshot.n_prompt, 0, int64_t(record.tokens.size()));
    record.cache_salt = std::move(snapshot.cache_salt);
    record.info.n_tokens = int64_t(record.tokens.size());
    impl.record_pool_stats();
    return n_restored;
  });
}

int64_t Engine::erase_slot(int32_t id) {
  Impl& impl = *impl_;
  return impl.on_engine_thread<int64_t>([&impl, id] {
    std::lock_guard<std::mutex> lock(impl.mutex);
    Impl::SlotRecord& record = impl.idle_slot(id);
    const BlockKey root = root_block_key(impl.options.model_id, record.cache_salt);
    for (const BlockKey& key : block_keys(root, record.tokens, int64_t(record.tokens.size()), impl.kv.block_size())) {
      impl.kv.forget(key);
      impl.checkpoints.forget(key);
    }
    const int64_t n_erased = int64_t(record.tokens.size());
    record.tokens.clear();
    record.n_prompt = 0;
    record.info.n_tokens = 0;
    impl.record_pool_stats();
    return n_erased;
  });
}

}  // namespace tf
