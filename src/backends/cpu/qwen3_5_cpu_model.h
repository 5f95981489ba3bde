// Qwen3.5-class hybrids on the CPU backend (the reference): Gated DeltaNet layers run token by token
// in f32, gated attention layers (query + output gate, QK-norm, partial RoPE) over the KV cache.
#pragma once
#include <memory>
#include <vector>

#include "backends/cpu/hidden_taps.h"
#include "backends/cpu/hybrid_state_storage.h"
#include "backends/cpu/qwen3_5_layers.h"
#include "core/thread_pool.h"
#include "models/model.h"
#include "models/qwen3_5_weights.h"
#include "runtime/kv_cache.h"

namespace tf {

class Qwen35CpuModel : public Model {
 public:
  // `storage` keeps whatever the weight views point into (mapped files or owned buffers) alive.
  Qwen35CpuModel(ModelConfig config, Qwen35Weights weights, std::shared_ptr<const void> storage, int n_threads);

  const ModelConfig& config() const override { return config_; }
  void forward(const Batch& batch, KvCache& kv, float* logits) override;
  std::unique_ptr<KvStorage> make_kv_storage(int64_t n_slots) const override;
  int64_t weight_bytes_per_step() const override;
  void set_tap_layers(std::vector<int> layers) override;
  const std::vector<float>& taps() const override { return taps_.values(); }
  // The CPU drafter, sharing this model's embedding and LM head.
  std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, int n_threads) const override;
  // The checkpoint's MTP head (mtp.*); an error naming the directory and the tensor when it has none.
  std::shared_ptr<MtpHead> load_mtp_head(int n_threads) const override;
  int64_t recurrent_state_bytes() const override;
  std::string recurrent_state_format() const override;
  void read_recurrent_state(KvCache& kv, int32_t lane, int64_t position, uint8_t* out) override;
  void keep_recurrent_state(KvCache& kv, int32_t lane, int64_t position) override;
  void read_kept_recurrent_state(KvCache& kv, int32_t lane, uint8_t* out) override;
  void write_recurrent_state(KvCache& kv, int32_t lane, int64_t position, const uint8_t* in) override;

 private:
  // The lane's state brought to `position` (read_recurrent_state's contract); its storage.
  HybridStateStorage& fold_recurrent_state(KvCache& kv, int32_t lane, int64_t position);
  void attention_block(int64_t layer, int64_t attention_index, HybridStateStorage& storage);
  void delta_net_block(int64_t layer, int64_t linear_index, const Batch& batch, HybridStateStorage& storage);
  void replay_lane(const Qwen35LayerWeights& w, int64_t linear_index, const std::vector<int32_t>& replay,
                   LaneRecurrence& state);
  void recurrence(int64_t linear_index, const Batch& batch, HybridStateStorage& storage);

  ModelConfig config_;
  Qwen35Weights weights_;
  std::shared_ptr<const void> storage_;
  ThreadPool pool_;
  std::vector<float> inverse_frequencies_;  // of the rotary dimensions only
  uint64_t n_passes_ = 0;
  cpu::HiddenTaps taps_;

  // Per forward.
  HybridPassPlan plan_;
  std::vector<int32_t> positions_;
  std::vector<int32_t> row_slots_;     // [n_rows] each row's kv_slot
  KeySlots key_slots_;
  std::vector<const int32_t*> key_slot_lists_;

  // Scratch, resized per forward.
  std::vector<float> hidden_;     // [n_rows][hidden]
  cpu::Qwen35LayerScratch scratch_;  // attention and MLP; its attn_out also holds the DeltaNet's [n_rows][value_dim]
  std::vector<float> mixed_;      // [n_rows][conv_dim] pre-conv q/k/v
  std::vector<float> conv_out_;   // [n_rows][conv_dim] after conv, silu and q/k normalisation
  std::vector<float> z_;          // [n_rows][value_dim]
  std::vector<float> b_;          // [n_rows][n_value_heads]
  std::vector<float> a_;          // [n_rows][n_value_heads]
  std::vector<float> decay_beta_; // [n_rows][2 * n_value_heads]: g then beta per head
};

}  // namespace tf
