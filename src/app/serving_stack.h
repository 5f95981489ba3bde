// The composition root: one options struct becomes a tokenizer, a model, a drafter and an engine.
// serve, generate, spec-bench and spec-eval all start here; they see the engine, the tokenizer and
// plain facts about the model, never a model type.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backends/backends.h"
#include "engine/engine.h"
#include "engine/slot_file.h"
#include "loader/generation_config.h"
#include "tokenizer/chat_template.h"

namespace tf {

class Tokenizer;

struct ServingOptions {
  std::string model_dir;  // a Hugging Face directory; with `synthetic`, only its tokenizer is read
  std::string synthetic;  // random weights of this shape (models/synthetic.h) instead: benchmarks
  int synthetic_bits = 0;          // 0: bf16; 4 or 8: MLX-quantized synthetic weights
  std::string drafter = "auto";    // a DFlash drafter directory, "mtp", "auto" or "none" (resolve_drafter_dir)
  bool needs_tokenizer = true;     // false: a model driven by token ids may lack tokenizer.json
  std::string chat_template = "auto";  // the chat template family: "auto" recognises the directory's
  ModelLoadOptions load;
  // The engine load() starts; none for benchmarks, which start one per run with make_engine().
  std::optional<EngineOptions> engine = EngineOptions{};
};

// What callers need to know about the loaded model, as plain values.
struct ModelFacts {
  std::string model_id;     // what /v1/models lists: the directory's name, or the synthetic shape
  std::string model_dir;
  std::string drafter_dir;  // empty: no block drafter
  bool uses_mtp = false;    // drafter "mtp": the checkpoint's own MTP head drafts
  int64_t vocab_size = 0;
  int64_t context_length = 0;  // max_position_embeddings: the most n_ctx can be
  std::string device;          // "cpu" or "cuda"
  std::string numerics;        // device_numerics(load options): what fixes the bits of a reply here
  GenerationDefaults generation_defaults;  // generation_config.json's sampling fields
};

// The model used when --model is not given: the embedded default under the source tree.
std::string default_model_dir();
// The block drafter trained for the default model.
std::string default_drafter_dir();
// The drafter directory options.drafter names: "none" or "" none; "auto" the embedded drafter when
// running the embedded model on the CPU, else none; anything else that directory (which must exist).
std::string resolve_drafter_dir(const ServingOptions& options);
// The facts knowable without loading weights (config.json or the synthetic shape), so flags can be
// checked before a long load; throws tf::Error naming the file.
ModelFacts read_model_facts(const ServingOptions& options);

class ServingStack {
 public:
  // Loads the tokenizer, the model and the drafter, and starts options.engine if given. Throws
  // tf::Error for a missing or inconsistent file.
  static std::shared_ptr<ServingStack> load(const ServingOptions& options);
  ~ServingStack();
  ServingStack(const ServingStack&) = delete;
  ServingStack& operator=(const ServingStack&) = delete;

  const ModelFacts& facts() const;
  // Null only when options.needs_tokenizer was false and the directory has no tokenizer.json.
  std::shared_ptr<const Tokenizer> tokenizer() const;
  // The directory's chat template (family none when it has none).
  const ChatTemplate& chat_template() const;
  // The engine load() started (null when options.engine was none).
  std::shared_ptr<Engine> engine() const;
  // Another engine on the same weights and drafter: benchmarks vary lanes and context per run.
  std::shared_ptr<Engine> make_engine(const EngineOptions& options) const;
  // The model's files with their SHA-256 (saved slots name it), read on first use and kept.
  const ModelIdentity& identity() const;

 private:
  struct Parts;
  explicit ServingStack(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace tf
