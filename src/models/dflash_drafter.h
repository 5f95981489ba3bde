// DFlash block drafter (the interface every backend implements): a few Qwen3-style layers that,
// conditioned on taps of the target's hidden states, predict a block of tokens in one non-causal forward.
//
// Context: for each committed token t, the taps of the target layers target_layer_ids (output of
// each layer, before the final norm) are concatenated, projected by fc and normed by hidden_norm
// into c_t; every drafter layer turns c_t into a context key/value (its own k_proj/v_proj,
// k_norm, RoPE at t) kept in the lane's DrafterContext, one entry per committed token.
// Block: [last token at p, mask, ..., mask] at positions p..p+B-1, embedded with the target's
// embedding; each block row attends to context entries 0..p-1 and to all B block rows (no causal
// mask inside the block). Rows 1..B-1 go through the final norm and the target's LM head and
// predict tokens p+1..p+B-1.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "models/qwen3_weights.h"
#include "models/token_guess.h"

namespace tf {

// The drafter's config.json ("architectures": ["DFlashDrafter"]), validated once at load.
struct DFlashConfig {
  int64_t block_size = 0;                // B: tokens per block, the last verified one included
  std::vector<int32_t> target_layer_ids;  // target layers whose outputs are tapped, in fc order
  int32_t mask_token_id = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float rms_norm_eps = 0;
  double rope_theta = 0;
  int64_t target_hidden_size = 0;
  int64_t vocab_size = 0;

  // Reads DIR/config.json; throws tf::Error naming the file and the field.
  static DFlashConfig load(const std::string& drafter_dir);
  // Checks ranges, and that the drafter fits `target` (hidden size, vocabulary, tapped layers).
  void validate(const std::string& source, const ModelConfig& target) const;
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t n_taps() const { return int64_t(target_layer_ids.size()); }
  // Floats of taps per token: [n_taps][target_hidden_size].
  int64_t tap_width() const { return n_taps() * target_hidden_size; }
};

struct DFlashWeights {
  WeightMatrix fc;                        // [hidden][n_taps * target_hidden]
  WeightVector hidden_norm;               // [hidden]
  std::vector<Qwen3LayerWeights> layers;  // same shapes as a Qwen3 layer of the drafter's config
  WeightVector final_norm;                // [hidden]
  WeightMatrix embed_tokens;              // the target's [vocab][hidden] (on the CPU)
  WeightMatrix lm_head;                   // the target's [vocab][hidden] (on the CPU)
};

// The drafter's own tensors in its checkpoint, bound in place (embed_tokens and lm_head are left
// empty: they are the target's). Throws tf::Error naming the tensor.
DFlashWeights bind_dflash_weights(const Checkpoint& checkpoint, const DFlashConfig& config);

// One lane's injected context: the K/V of every committed token in every drafter layer, plus
// scratch room at the end for the block being drafted, kept where the drafter's backend runs.
class DrafterContext {
 public:
  // Where a backend keeps the entries; the drafter makes it on first use.
  struct Storage {
    virtual ~Storage() = default;
  };

  int64_t size() const { return n_entries_; }
  // Drops entries at positions >= n (tokens the target rejected, or a rolled-back lane).
  void truncate(int64_t n) {
    if (n < n_entries_) n_entries_ = n;
  }

 private:
  friend class DFlashDrafter;
  int64_t n_entries_ = 0;
  std::unique_ptr<Storage> storage_;
};

// The block drafter, on some backend. Drafts only propose: the target verifies every token, so a
// backend's rounding changes which drafts are accepted, never the reply.
class DFlashDrafter {
 public:
  virtual ~DFlashDrafter() = default;

  const DFlashConfig& config() const { return config_; }
  int64_t n_block_logits() const { return config_.block_size - 1; }

  // Appends the entries of the next n_tokens committed tokens (positions context.size() ...);
  // taps: [n_tokens][config().tap_width()]. Each entry depends on its own token's taps alone.
  virtual void append_context(DrafterContext& context, const float* taps, int64_t n_tokens) = 0;

  // Drafts the block after last_token at `position`, seeing context entries 0..position-1
  // (context.size() must be at least position). logits: [B-1][vocab], row j predicting the
  // token at position + 1 + j. Uses the context's scratch room; committed entries are unchanged.
  void propose_block(DrafterContext& context, int32_t last_token, int64_t position, float* logits);
  // The same in two steps, so a proposer can stop paying for the LM head where its confidence
  // ends: run_block keeps the block's final-normed rows, block_logits(j) gives row j's logits
  // (bitwise what propose_block writes there: the LM head's rows are independent).
  virtual void run_block(DrafterContext& context, int32_t last_token, int64_t position) = 0;
  virtual void block_logits(int64_t row, float* logits) = 0;
  // The k likeliest tokens of block row `row` (ties to the lower id), best first, with their
  // softmax probabilities: what a proposer reads of a row. By default from block_logits.
  using Guess = TokenGuess;
  virtual std::vector<Guess> block_top(int64_t row, int64_t k);

 protected:
  explicit DFlashDrafter(DFlashConfig config) : config_(std::move(config)) {}
  // The context's storage of type T, made on first use.
  template <class T>
  static T& storage_of(DrafterContext& context) {
    if (!context.storage_) context.storage_ = std::make_unique<T>();
    return static_cast<T&>(*context.storage_);
  }
  static void set_size(DrafterContext& context, int64_t n) { context.n_entries_ = n; }
  // Fails unless a block may be drafted at `position` after `last_token`.
  void check_block(const DrafterContext& context, int32_t last_token, int64_t position) const;

  DFlashConfig config_;

 private:
  std::vector<float> row_logits_;  // block_top's scratch
};

// The k highest logits' token ids, best first; ties go to the lower id (as the sampler's argmax).
std::vector<int32_t> top_k_tokens(const float* logits, int64_t n_vocab, int64_t k);
// top_k_tokens(logits, n_vocab, 1)[0] without the sort.
int32_t argmax_token(const float* logits, int64_t n_vocab);

}  // namespace tf
