// Hidden-state taps for a block drafter (Model::set_tap_layers) on the CPU: copies of chosen decoder
// layers' residual stream for every row of a forward. They never feed back into the forward.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace tf::cpu {

class HiddenTaps {
 public:
  // Throws tf::Error for a layer outside the model's n_layers.
  void set_layers(std::vector<int> layers, int64_t n_layers) {
    for (int layer : layers)
      if (layer < 0 || layer >= n_layers)
        fail("tap layer " + std::to_string(layer) + " is outside the model's " + std::to_string(n_layers) +
             " layers");
    layers_ = std::move(layers);
    values_.clear();
  }
  void begin(int64_t n_rows, int64_t hidden) {
    hidden_ = hidden;
    values_.resize(size_t(n_rows * int64_t(layers_.size()) * hidden));
  }
  // After decoder layer `layer`, with the residual stream of the forward's n_rows rows.
  void after_layer(int64_t layer, const float* residual, int64_t n_rows) {
    const int64_t n_taps = int64_t(layers_.size());
    for (int64_t t = 0; t < n_taps; ++t) {
      if (layers_[size_t(t)] != layer) continue;
      for (int64_t r = 0; r < n_rows; ++r)
        std::memcpy(values_.data() + (r * n_taps + t) * hidden_, residual + r * hidden_,
                    size_t(hidden_) * sizeof(float));
    }
  }
  // [n_rows of the last forward][n_tap_layers * hidden], layers in the order given.
  const std::vector<float>& values() const { return values_; }

 private:
  std::vector<int> layers_;
  std::vector<float> values_;
  int64_t hidden_ = 0;
};

}  // namespace tf::cpu
