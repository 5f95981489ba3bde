// The DFlash block drafter on the CPU (see models/dflash_drafter.h for the architecture).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "loader/checkpoint.h"
#include "models/dflash_drafter.h"
#include "models/qwen3_weights.h"

namespace tf {

// The drafter on the CPU, in f32 over the checkpoint's mapped weights.
class CpuDFlashDrafter final : public DFlashDrafter {
 public:
  // Loads DIR/config.json and DIR/model.safetensors. The embedding and LM head are the target's
  // (a dense or a hybrid target alike): what they point into must outlive the drafter. Throws
  // tf::Error naming the file and the field or tensor.
  CpuDFlashDrafter(const std::string& drafter_dir, const ModelConfig& target_config,
                   const WeightMatrix& target_embed_tokens, const WeightMatrix& target_lm_head, int n_threads);

  void append_context(DrafterContext& context, const float* taps, int64_t n_tokens) override;
  void run_block(DrafterContext& context, int32_t last_token, int64_t position) override;
  void block_logits(int64_t row, float* logits) override;
  std::vector<Guess> block_top(int64_t row, int64_t k) override;

 private:
  struct ContextStorage : DrafterContext::Storage {
    std::vector<std::vector<float>> keys;    // [n_layers][entries + scratch][kv_dim]
    std::vector<std::vector<float>> values;  // [n_layers][entries + scratch][kv_dim]
  };
  ContextStorage& ensure_room(DrafterContext& context, int64_t n_slots) const;
  // Row `row` of the block's logits, computing it (and the rows after it, in one pass) if needed.
  const float* head_row(int64_t row);
  // Rotated, normed K and V of `rows` inputs of layer `layer`, written to slots first_slot...
  void write_kv(ContextStorage& storage, int64_t layer, const float* inputs, int64_t n_rows,
                int64_t first_slot, const int32_t* positions);

  std::shared_ptr<Checkpoint> checkpoint_;
  DFlashWeights weights_;
  ThreadPool pool_;
  std::vector<float> inverse_frequencies_;

  // Scratch, resized per call.
  std::vector<float> features_;  // [n_rows][hidden]  context features c_t, or block hidden
  std::vector<float> normed_;    // [n_rows][hidden]
  std::vector<float> q_;         // [n_rows][q_dim]
  std::vector<float> k_;         // [n_rows][kv_dim]
  std::vector<float> attn_out_;  // [n_rows][q_dim]
  std::vector<float> proj_;      // [n_rows][hidden]
  std::vector<float> gate_;      // [n_rows][intermediate]
  std::vector<float> up_;        // [n_rows][intermediate]
  std::vector<int32_t> key_slots_;
  std::vector<float> block_normed_;  // [B-1][hidden] the last run_block's predicting rows
  std::vector<float> head_logits_;   // [B-1][vocab] those rows' logits, the first n_head_rows_ computed
  int64_t n_head_rows_ = 0;
};

}  // namespace tf
