// What the engine is asked to do and what it reports back, in native types (no JSON here).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "sampling/sampler.h"
#include "speculation/speculation.h"

namespace tf {

// What a request forces on its tokens; each applies identically to every verified row, so the
// reply does not depend on drafts or neighbours.
struct TokenConstraints {
  std::shared_ptr<const Grammar> grammar;             // null: free text; else the reply's bytes follow it
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the raw logits; ascending by token, unique
  int64_t min_tokens = 0;               // EOS and stop_token_ids are refused before this many tokens
  std::vector<int32_t> stop_token_ids;  // end the reply like EOS (not part of it), even with ignore_eos
  bool is_empty() const { return !grammar && logit_bias.empty() && min_tokens == 0 && stop_token_ids.empty(); }
};

// A string that ends the reply where it completes and stays in it, except inside the section from
// quiet_open to quiet_close, where it is only quoted ("</tool_call>" ends a reply of one call, not
// a thought that mentions it): the reply starts inside it when starts_quiet, or opens it when the
// reply begins with quiet_open (as a Qwen3 reply opens <think>).
struct ClosingString {
  std::string text;
  std::string quiet_open;
  std::string quiet_close;
  bool starts_quiet = false;
  std::string armed_by;  // the closing string counts only after this (outside quiet): "<tool_call>"; empty: always
};

struct GenerationRequest {
  std::vector<int32_t> prompt;    // token ids, non-empty
  int64_t max_tokens = 16;        // completion budget, >= 1
  SamplingParams sampling;        // seed already chosen (the server draws one when absent)
  std::vector<std::string> stop;  // stop strings; text from a stop string on is never sent
  std::optional<ClosingString> closing;  // ends the reply after it (kept), unlike a stop string
  bool ignore_eos = false;
  // Special tokens (Tokenizer::is_special) add no text to the reply, as vLLM's default; they are
  // still tokens of the reply (logprobs, token_sha).
  bool skips_special_tokens = true;
  int32_t n_top_logprobs = -1;    // -1: no logprobs; 0..20: logprob of each token plus the n best
  bool wants_provenance = false;  // report how each token reached the reply (TokenProvenance)
  // The prefix cache: adopt the longest cached prefix of the prompt and publish this request's
  // full blocks. Off, the request neither reads nor feeds the cache. Requests share cached blocks
  // only with requests of the same salt (tenants keep their prefixes apart).
  bool cache_prompt = true;
  std::string cache_salt;
  // The slot the request runs in (llama.cpp's id_slot), so a client can save that slot afterwards:
  // kAnySlot, or 0..n_parallel-1, and then the request waits in the queue while that slot is busy.
  static constexpr int32_t kAnySlot = -1;
  int32_t slot = kAnySlot;
  TokenConstraints constraints;
  // Which proposers draft ("draft": false is none) and the replay benchmark. Tokens always come
  // from the target alone: this changes speed, never the reply.
  DraftRequest draft;
};

enum class FinishReason { stop, length, cancelled, error };
const char* finish_reason_name(FinishReason reason);

// How a token reached the reply: drafted by a proposer and accepted, or the target's own token of
// its round (the one every round adds after its accepted drafts). Speed only: the token is the
// target's choice either way.
struct TokenProvenance {
  static constexpr int8_t kTarget = -1;
  int8_t source = kTarget;  // kTarget, or the ProposerKind whose draft was accepted
  int64_t round = 0;        // the reply's round (1-based) that produced it
};

struct TokenLogprobs {
  int32_t token;
  float logprob;
  std::vector<TokenLogprob> top;  // best first
};

// Per-reply figures (llama.cpp's `timings`, plus speculation counters).
struct ReplyTimings {
  int64_t prompt_n = 0;
  int64_t cache_n = 0;  // prompt tokens whose K/V came from the prefix cache (not in prompt_ms)
  double prompt_ms = 0;
  int64_t predicted_n = 0;
  double predicted_ms = 0;
  int64_t rounds = 0;            // target forwards that produced tokens for this reply
  int64_t draft_n = 0;           // drafted tokens verified
  int64_t draft_accepted_n = 0;  // drafted tokens accepted
  double tokens_per_round() const { return rounds ? double(predicted_n) / double(rounds) : 0.0; }
};

// One update for a request, in order. Completion tokens are every generated token except a final
// EOS; `text` is what may be sent now (text that might begin a stop string is held back until it
// is resolved; nothing from a stop string on is ever sent).
struct GenerationUpdate {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprobs> logprobs;  // one per token in `tokens` when requested
  std::vector<TokenProvenance> provenance;  // one per token in `tokens` when requested
  bool is_final = false;
  FinishReason finish_reason = FinishReason::stop;  // meaningful when is_final
  std::string error;                                // when finish_reason == error
  bool is_constraint_failure = false;  // the error is the request's: its constraint (grammar) cannot go on
  ReplyTimings timings;                             // when is_final
  std::string token_sha;  // when is_final: hex SHA-256 of all completion token ids (int32 LE)
};

// Called on the engine thread; must not block. Returning false cancels the request (client gone);
// the lane is freed within a round.
using UpdateSink = std::function<bool(const GenerationUpdate&)>;

}  // namespace tf
