// A Qwen3.5-class checkpoint's MTP head on the CPU (see models/mtp_head.h for the architecture), in
// f32 with the hybrid model's own attention and MLP pieces (qwen3_5_layers.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/qwen3_5_layers.h"
#include "core/thread_pool.h"
#include "loader/model_config.h"
#include "models/mtp_head.h"
#include "models/qwen3_5_weights.h"

namespace tf {

class CpuMtpHead final : public MtpHead {
 public:
  // weights.mtp must be bound; `keep_alive` holds what the weight views point into.
  CpuMtpHead(const ModelConfig& config, const Qwen35Weights& weights, std::shared_ptr<const void> keep_alive,
             int n_threads);

  void append_context(MtpContext& context, const float* taps, const int32_t* next_tokens, int64_t n) override;
  bool begin_chain(MtpContext& context) override;
  std::vector<TokenGuess> chain_top(MtpContext& context, int64_t k) override;
  void chain_step(MtpContext& context, int32_t token) override;

 private:
  struct ContextStorage : MtpContext::Storage {
    std::vector<float> keys;         // [entries + scratch][kv_dim]
    std::vector<float> values;       // [entries + scratch][kv_dim]
    std::vector<float> last_output;  // [hidden] the last entry's output after mtp.norm
    int64_t last_output_entry = -1;  // which entry last_output belongs to
    std::vector<float> chain_output; // [hidden] the chain's latest output after mtp.norm
    int64_t chain_length = 0;        // steps taken since begin_chain
  };
  // Runs n rows at positions first .. first + n - 1 (K/V to the slots of the same numbers): hidden
  // [n][hidden] is the normed hidden state each row reads (before pre_fc_norm_hidden). Writes the
  // last row's output after mtp.norm to `last_output`.
  void run_rows(ContextStorage& storage, const float* hidden, const int32_t* tokens, int64_t n, int64_t first,
                float* last_output);

  ModelConfig config_;
  Qwen35MtpWeights mtp_;
  WeightMatrix embed_tokens_;
  WeightVector final_norm_;
  WeightMatrix lm_head_;
  std::shared_ptr<const void> keep_alive_;
  std::shared_ptr<std::vector<std::vector<float>>> owned_;  // the shifted gains the views point into
  ThreadPool pool_;
  std::vector<float> inverse_frequencies_;

  // Scratch, resized per call.
  cpu::Qwen35LayerScratch scratch_;
  std::vector<float> normed_hidden_;  // [n][hidden]
  std::vector<float> fc_input_;       // [n][2 * hidden]
  std::vector<float> x_;              // [n][hidden] the layer's residual stream
  std::vector<int32_t> positions_, slots_, n_keys_, key_slots_;
  std::vector<const int32_t*> key_lists_;
  std::vector<float> logits_;         // [vocab]
};

}  // namespace tf
