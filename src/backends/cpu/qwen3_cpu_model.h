// Qwen3 (dense decoder: RMSNorm, QK-norm, RoPE, GQA attention, SwiGLU) on the CPU backend.
#pragma once
#include <memory>
#include <vector>

#include "backends/cpu/hidden_taps.h"
#include "backends/cpu/host_kv_storage.h"
#include "core/thread_pool.h"
#include "models/model.h"
#include "models/qwen3_weights.h"
#include "runtime/kv_cache.h"

namespace tf {

class Qwen3CpuModel : public Model {
 public:
  // `storage` keeps whatever the weight views point into (mapped files or owned buffers) alive.
  Qwen3CpuModel(ModelConfig config, Qwen3Weights weights, std::shared_ptr<const void> storage,
                int n_threads);

  const ModelConfig& config() const override { return config_; }
  void forward(const Batch& batch, KvCache& kv, float* logits) override;
  std::unique_ptr<KvStorage> make_kv_storage(int64_t n_slots) const override;
  int64_t weight_bytes_per_step() const override;
  void set_tap_layers(std::vector<int> layers) override;
  const std::vector<float>& taps() const override { return taps_.values(); }
  // The CPU drafter, sharing this model's embedding and LM head.
  std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, int n_threads) const override;
  // The bound weights; a drafter shares the embedding and the LM head.
  const Qwen3Weights& weights() const { return weights_; }

 private:
  void attention_block(int64_t layer, const Batch& batch, HostKvStorage& kv);
  void mlp_block(int64_t layer, int64_t n_rows);
  template <class Fn>
  void for_rows(int64_t n_rows, const Fn& fn);

  ModelConfig config_;
  Qwen3Weights weights_;
  std::shared_ptr<const void> storage_;
  ThreadPool pool_;
  std::vector<float> inverse_frequencies_;
  cpu::HiddenTaps taps_;

  // Scratch, resized per forward.
  std::vector<float> hidden_;    // [n_rows][hidden]   residual stream
  std::vector<float> normed_;    // [n_rows][hidden]
  std::vector<float> q_;         // [n_rows][n_heads * head_dim]
  std::vector<float> k_;         // [n_rows][n_kv_heads * head_dim]
  std::vector<float> v_;         // [n_rows][n_kv_heads * head_dim]
  std::vector<float> attn_out_;  // [n_rows][n_heads * head_dim]
  std::vector<float> proj_;      // [n_rows][hidden]
  std::vector<float> gate_;      // [n_rows][intermediate]
  std::vector<float> up_;        // [n_rows][intermediate]
  std::vector<int32_t> positions_;
  KeySlots key_slots_;
  std::vector<const int32_t*> key_slot_lists_;  // [n_rows] into key_slots_.slots
};

}  // namespace tf
