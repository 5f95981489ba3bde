// Runs generation requests through a real Engine and collects the replies (tests only).
#pragma once
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/reply_collector.h"
#include "models/model.h"

namespace tf::test {

using ::tf::Reply;
using ::tf::ReplyCollector;

// Each request alone on a fresh engine (together = false), or all submitted at once to one engine.
inline std::vector<Reply> run_requests(std::shared_ptr<Model> model,
                                       const std::vector<GenerationRequest>& requests,
                                       const EngineOptions& options, bool together,
                                       std::shared_ptr<const Tokenizer> tokenizer = nullptr,
                                       std::shared_ptr<DFlashDrafter> drafter = nullptr) {
  if (together) {
    Engine engine(options, model, tokenizer, drafter);
    return run_to_completion(engine, requests);
  }
  std::vector<Reply> replies;
  for (const auto& r : requests) {
    Engine engine(options, model, tokenizer, drafter);
    replies.push_back(run_to_completion(engine, {r})[0]);
  }
  return replies;
}

// Random prompts of random lengths; sampled requests use temperature 0.7, top-k 20, top-p 0.95.
inline std::vector<GenerationRequest> random_requests(int n, bool sampled, int64_t vocab, uint32_t seed,
                                                      int64_t max_prompt = 60, int64_t max_reply = 28) {
  std::mt19937 rng(seed);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    int64_t len = 3 + int64_t(rng() % uint32_t(max_prompt - 2));
    for (int64_t j = 0; j < len; ++j) r.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    r.max_tokens = 8 + int64_t(rng() % uint32_t(max_reply - 7));
    r.ignore_eos = true;
    if (sampled) {
      r.sampling.temperature = 0.7f;
      r.sampling.top_k = 20;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 1000 + uint64_t(i);
    }
    requests.push_back(r);
  }
  return requests;
}

}  // namespace tf::test
