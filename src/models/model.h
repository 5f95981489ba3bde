// A target model on a backend: one forward call carries every row of a round.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/batch.h"
#include "engine/kv_storage.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "sampling/sampler.h"

namespace tf {

class KvCache;
class DFlashDrafter;
struct Qwen3Weights;

// Who chooses the token after a logit row. With `sampling` set (greedy or seeded, penalties off) the
// model chooses it next to the logits (on a GPU they then never leave it): on the CPU the token
// Sampler::sample gives for those logits, parameters and position; on the GPU greedy is the same
// argmax, and a seeded draw comes from the same distribution and random number with the GPU's own
// fixed sum order (cuda/sample.cuh). Either way it depends on the row, parameters and position
// alone. Without, the caller wants the row's logits (penalties need the reply so far; logprobs
// need the distribution).
struct LogitRowPick {
  const SamplingParams* sampling = nullptr;
  int64_t position = 0;  // the index the chosen token will have in its sequence
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs every row of the batch; each row's K/V is written to its kv_slot. For each row with
  // wants_logits, writes n_vocab logits to `logits` in row order (logits rows are packed).
  virtual void forward(const Batch& batch, KvCache& kv, float* logits) = 0;
  // forward(), then for logit row i (rows with wants_logits, in order; picks has one per row):
  // tokens[i] = the chosen token when picks[i].sampling is set, else -1 and the row's logits go to
  // `logits`, packed in row order (only the rows without a pick take space there).
  virtual void forward_and_pick(const Batch& batch, KvCache& kv, const std::vector<LogitRowPick>& picks,
                                int32_t* tokens, float* logits);
  // Keys and values of n_slots positions in every layer, in this backend's memory and type; a
  // KvCache made with the model (KvCache(model, n_blocks)) holds it.
  virtual std::unique_ptr<KvStorage> make_kv_storage(int64_t n_slots) const = 0;
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
  // Host-side views of the checkpoint's weights, which a block drafter on the CPU shares (embedding
  // and LM head); nullptr when there are none (weights generated on a device).
  virtual const Qwen3Weights* host_weights() const { return nullptr; }
  // [n_rows of the last forward][n_tap_layers * hidden], layers in the order given.
  virtual const std::vector<float>& taps() const {
    static const std::vector<float> none;
    return none;
  }
  // The block drafter in drafter_dir, on this model's backend and sharing its embedding and LM head:
  // by default on the CPU (load_cpu_drafter).
  virtual std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, int n_threads) const;

 private:
  std::vector<float> all_logits_;  // forward_and_pick's default: every logit row of a forward
};

struct ModelLoadOptions {
  std::string device = "cpu";  // "cpu" or "cuda"
  int n_threads = 0;           // CPU worker threads; 0 = one per core
  LoadProgress progress;
};

// Fails unless `device` is "cpu", or "cuda" in a build with the CUDA backend.
void require_device_in_build(const std::string& device);

// Loads config.json and the weights of a model directory for the chosen backend; a device this
// build lacks is an error that says so.
std::shared_ptr<Model> load_model(const std::string& model_dir, const ModelLoadOptions& options);

}  // namespace tf
