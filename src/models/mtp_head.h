// A checkpoint's own multi-token-prediction (MTP) head as a drafter (the interface every backend
// implements). Qwen3.5-class checkpoints ship one: entry t of a lane's context pairs the target's
// hidden state at t (after the target's final norm) with the embedding of the committed token t+1:
//   x_t = fc([pre_fc_norm_embedding(embed(token_{t+1})), pre_fc_norm_hidden(final_norm(h_t))])
// then one gated full-attention layer (RoPE at t, attending to entries 0..t, its own K/V) with its MLP,
// and mtp.norm; the target's LM head over that output predicts token t+2. A chain feeds the head's own
// output back as the next step's hidden state, one position on, with the token it chose.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/token_guess.h"

namespace tf {

// One lane's MTP context: the layer's K/V of every entry (one per committed position whose next
// token is committed too), plus scratch room past them for a chain being drafted.
class MtpContext {
 public:
  struct Storage {
    virtual ~Storage() = default;
  };

  int64_t size() const { return n_entries_; }
  // Drops entries at positions >= n (a lane's history restated from n on).
  void truncate(int64_t n) {
    if (n < n_entries_) n_entries_ = n;
  }

 private:
  friend class MtpHead;
  int64_t n_entries_ = 0;
  std::unique_ptr<Storage> storage_;
};

class MtpHead {
 public:
  virtual ~MtpHead() = default;

  // The target layer whose output (before the final norm, as Model::set_tap_layers gives it) is h_t:
  // the last one; the head applies the target's final norm itself.
  int tap_layer() const { return tap_layer_; }
  int64_t tap_width() const { return tap_width_; }

  // Appends the entries at positions context.size() ... context.size() + n - 1: taps [n][tap_width()]
  // of the target's rows there, next_tokens [n] the committed token after each. Each entry's K/V
  // depends on its own inputs alone. The last entry's output starts the next chain.
  virtual void append_context(MtpContext& context, const float* taps, const int32_t* next_tokens, int64_t n) = 0;
  // A chain from the context's last entry (whose output predicts the token at context.size() + 1):
  // false when there is none (an empty context, or entries dropped since the last append).
  virtual bool begin_chain(MtpContext& context) = 0;
  // The k likeliest tokens after the chain so far, best first (ties to the lower id).
  virtual std::vector<TokenGuess> chain_top(MtpContext& context, int64_t k) = 0;
  // One step on: the chosen token with the chain's last output as its hidden state, at the next
  // position, its K/V in the scratch room (committed entries are never touched).
  virtual void chain_step(MtpContext& context, int32_t token) = 0;

 protected:
  MtpHead(int tap_layer, int64_t tap_width) : tap_layer_(tap_layer), tap_width_(tap_width) {}
  template <class T>
  static T& storage_of(MtpContext& context) {
    if (!context.storage_) context.storage_ = std::make_unique<T>();
    return static_cast<T&>(*context.storage_);
  }
  static void set_size(MtpContext& context, int64_t n) { context.n_entries_ = n; }

 private:
  int tap_layer_;
  int64_t tap_width_;
};

}  // namespace tf
