// Output: each chosen token becomes an update for the request (text held back while it might
// begin a stop string), and a finished lane sends its final update; retiring it publishes its last
// full blocks and frees its KV.
#include <algorithm>

#include "core/sha256.h"
#include "engine/engine_impl.h"

namespace tf {

bool Engine::Impl::is_eos(int32_t token) const {
  return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
}

void Engine::Impl::on_token(Lane& lane, int32_t token, const float* row_logits, int8_t source) {
  auto now = EngineClock::now();
  if (lane.completion.empty()) {
    lane.first_token = now;
    lane.timings.prompt_ms = ms_between(lane.admitted, now);
  }
  if ((!lane.request.ignore_eos && is_eos(token)) || (lane.constraint && lane.constraint->is_stop_token(token))) {
    finish(lane, FinishReason::stop);
    return;
  }
  if (lane.constraint) lane.constraint->accept(token);
  lane.tokens.push_back(token);
  lane.completion.push_back(token);
  lane.counts[token] += 1;
  {
    std::lock_guard<std::mutex> lock(mutex);
    stats.generated_tokens += 1;
  }
  GenerationUpdate update;
  update.tokens.push_back(token);
  if (lane.request.wants_provenance) update.provenance.push_back({source, lane.timings.rounds});
  if (lane.request.n_top_logprobs >= 0) {
    int64_t n_vocab = model->config().vocab_size;
    update.logprobs.push_back({token, Sampler::logprob_of(row_logits, n_vocab, token),
                               Sampler::top_logprobs(row_logits, n_vocab,
                                                     lane.request.n_top_logprobs)});
  }
  if (lane.decoder) update.text = lane.stop_matcher->push(lane.decoder->push(token));
  if (lane.stop_matcher->is_stopped()) {
    if (!send(lane, update)) return;
    finish(lane, FinishReason::stop);
    return;
  }
  if (int64_t(lane.completion.size()) >= lane.request.max_tokens) {
    if (!send(lane, update)) return;
    finish(lane, FinishReason::length);
    return;
  }
  send(lane, update);
}

void Engine::Impl::retire_finished() {
  for (auto& lane : lanes) {
    if (!lane->is_finished) continue;
    publish_blocks(*lane);
    if (lane->has_kept_state) checkpoint_kept_state(*lane);
    leave_slot(*lane);
    kv.lane_close(lane->kv_lane);
  }
  lanes.erase(std::remove_if(lanes.begin(), lanes.end(), [](auto& l) { return l->is_finished; }), lanes.end());
}

bool Engine::Impl::send(Lane& lane, GenerationUpdate& update) {
  if (lane.sink(update)) return true;
  finish(lane, FinishReason::cancelled);
  return false;
}

void Engine::Impl::finish_with_constraint_failure(Lane& lane) {
  const std::string error = *lane.constraint->failure();
  lane.is_constraint_failure = true;
  finish(lane, FinishReason::error, error);
}

void Engine::Impl::finish(Lane& lane, FinishReason reason, const std::string& error) {
  if (lane.is_finished) return;
  lane.is_finished = true;
  GenerationUpdate update;
  if (reason != FinishReason::cancelled && reason != FinishReason::error && lane.decoder &&
      !lane.stop_matcher->is_stopped())
    update.text = lane.stop_matcher->push(lane.decoder->flush()) + lane.stop_matcher->flush();
  update.is_final = true;
  update.finish_reason = reason;
  update.error = error;
  update.is_constraint_failure = lane.is_constraint_failure;
  lane.timings.predicted_n = int64_t(lane.completion.size());
  if (!lane.completion.empty()) lane.timings.predicted_ms = ms_between(lane.first_token, EngineClock::now());
  update.timings = lane.timings;
  update.token_sha = token_sha(lane.completion);
  lane.sink(update);
}

}  // namespace tf
