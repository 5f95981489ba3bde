// A target model on a backend: one forward call carries every row of a round.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "runtime/batch.h"
#include "runtime/kv_cache.h"
#include "runtime/kv_storage.h"
#include "sampling/sampler.h"

namespace tf {

class DFlashDrafter;
class MtpHead;

// How the token after one logit row is chosen: by the backend's one sampler (Sampler::sample on the
// host, its kernel twin on a GPU) from the row's logits, the request's parameters, the position and
// the penalty history. The token depends on these alone: never on the row's neighbours, and never on
// whether the caller also wants the row's logits.
struct LogitRowPick {
  const SamplingParams* sampling = nullptr;  // required
  int64_t position = 0;                      // the index the chosen token will have in its sequence
  PenaltyHistory penalties = {};             // read only when the parameters have penalties
  bool wants_logits = false;                 // also hand back the row's raw logits (logprobs)
  LogitConstraint constraint = {};           // logit_bias and the allowed tokens (grammar, min_tokens)
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs every row of the batch; each row's K/V is written to its kv_slot. For each row with
  // wants_logits, writes n_vocab logits to `logits` in row order (logits rows are packed).
  virtual void forward(const Batch& batch, KvCache& kv, float* logits) = 0;
  // forward(), then for logit row i (rows with wants_logits, in order; picks has one per row):
  // tokens[i] = the token picks[i] chooses; rows whose pick wants_logits also get their raw logits in
  // `logits`, packed in row order (only those rows take space there).
  virtual void forward_and_pick(const Batch& batch, KvCache& kv, const std::vector<LogitRowPick>& picks,
                                int32_t* tokens, float* logits);
  // Keys and values of n_slots positions in every layer, in this backend's memory and type; a
  // KvCache made with the model (KvCache(model, n_blocks)) holds it.
  virtual std::unique_ptr<KvStorage> make_kv_storage(int64_t n_slots) const = 0;
  // Free memory of the device KV storage lives on, for a pool sized as a fraction of it (0: the
  // backend does not say; the CPU's memory is the operating system's to share).
  virtual int64_t free_kv_memory_bytes() const { return 0; }
  // Bytes of weights one decode step must read (every layer and the LM head; one embedding row),
  // the numerator of achieved bandwidth.
  virtual int64_t weight_bytes_per_step() const = 0;

  // Taps for a block drafter: after set_tap_layers({i, j, ...}), every forward also keeps the
  // output hidden state of decoder layers i, j, ... (0-based, before the final norm) for every
  // row, readable through taps() until the next forward. An empty list turns taps off. Backends
  // without taps fail on a non-empty list.
  virtual void set_tap_layers(std::vector<int> layers) {
    if (!layers.empty()) fail("this backend cannot return hidden-state taps for a drafter");
  }
  // [n_rows of the last forward][n_tap_layers * hidden], layers in the order given.
  virtual const std::vector<float>& taps() const {
    static const std::vector<float> none;
    return none;
  }
  // A recurrent model's per-lane state (a hybrid's DeltaNet and convolution state), which the
  // prefix cache and saved slots keep at block boundaries because K/V cannot rebuild it. Models
  // without one have 0 bytes and are never asked for it.
  virtual int64_t recurrent_state_bytes() const { return 0; }
  // The state's layout and element type: saved state is only put back into a model of the same form.
  virtual std::string recurrent_state_format() const { return {}; }
  // Copies out the state the lane's sequence has at `position`: every position before it is
  // committed, and none after the last forward's start is folded in yet (the state never rolls back).
  virtual void read_recurrent_state(KvCache& kv, int32_t lane, int64_t position, uint8_t* out) {
    (void)kv, (void)lane, (void)position, (void)out;
    fail_internal("this model has no recurrent state to read");
  }
  // Keeps aside, in the model's own memory, the state read_recurrent_state would copy out at
  // `position`, in place of what the lane kept before. Where the state lives on a GPU this is a
  // copy on the device, so holding every lane's last block state costs no trip to the host.
  virtual void keep_recurrent_state(KvCache& kv, int32_t lane, int64_t position) {
    (void)kv, (void)lane, (void)position;
    fail_internal("this model has no recurrent state to keep");
  }
  // Copies out the state keep_recurrent_state kept last for the lane.
  virtual void read_kept_recurrent_state(KvCache& kv, int32_t lane, uint8_t* out) {
    (void)kv, (void)lane, (void)out;
    fail_internal("this model has no recurrent state to read");
  }
  // Starts the lane's sequence at `position` from a state read_recurrent_state gave for the same
  // tokens: its next forward's first row is at `position`.
  virtual void write_recurrent_state(KvCache& kv, int32_t lane, int64_t position, const uint8_t* in) {
    (void)kv, (void)lane, (void)position, (void)in;
    fail_internal("this model has no recurrent state to write");
  }
  // The block drafter in drafter_dir, on this model's backend and sharing its embedding and LM head.
  // Throws tf::Error naming the directory and the field or tensor.
  virtual std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, int n_threads) const = 0;
  // The checkpoint's own MTP head on this model's backend, sharing its embedding, final norm and LM
  // head (Qwen3.5-class checkpoints carry one). Throws tf::Error saying why there is none.
  virtual std::shared_ptr<MtpHead> load_mtp_head(int n_threads) const {
    (void)n_threads;
    fail("this model has no MTP head (mtp.* tensors come with Qwen3.5-class checkpoints, on the CPU backend)");
  }

 private:
  std::vector<float> all_logits_;  // forward_and_pick's default: every logit row of a forward
  Sampler sampler_;
};

// A KV cache of n_blocks blocks in the model's own storage (Model::make_kv_storage).
inline KvCache make_kv_cache(const Model& model, int64_t n_blocks) {
  return KvCache(model.make_kv_storage(n_blocks * kKvBlockSize), n_blocks);
}

}  // namespace tf
