// The composition root: the one place that turns options into tokenizer + model + drafter + engine.
#include "app/serving_stack.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/error.h"
#include "core/sha256.h"
#include "loader/model_config.h"
#include "models/dflash_drafter.h"
#include "models/mtp_head.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

std::string model_id_of(const std::string& model_dir) {
  fs::path path(model_dir);
  if (!path.has_filename()) path = path.parent_path();  // "models/x/" names x
  return path.filename().string();
}

std::shared_ptr<const Tokenizer> load_tokenizer(const ServingOptions& options) {
  const std::string path = (fs::path(options.model_dir) / "tokenizer.json").string();
  if (!options.needs_tokenizer && !fs::exists(path)) return nullptr;
  return Tokenizer::from_file(path);
}

}  // namespace

std::string default_model_dir() {
#ifdef TF_DEFAULT_MODEL_DIR
  return TF_DEFAULT_MODEL_DIR;
#else
  return "models/tensorfold-code-target";
#endif
}

std::string default_drafter_dir() {
#ifdef TF_DEFAULT_DRAFTER_DIR
  return TF_DEFAULT_DRAFTER_DIR;
#else
  return "models/tensorfold-code-drafter";
#endif
}

std::string resolve_drafter_dir(const ServingOptions& options) {
  const std::string& drafter = options.drafter;
  if (drafter == "none" || drafter.empty() || drafter == "mtp") return "";
  if (!options.synthetic.empty()) {
    if (drafter == "auto") return "";
    fail("a synthetic model takes no drafter (its weights are random: a drafter trained for another model "
         "would only cost time); give drafter 'none' or 'auto'");
  }
  if (drafter != "auto") {
    if (!fs::is_directory(drafter)) fail("the drafter " + drafter + " is not a directory (give a DFlash drafter directory)");
    return drafter;
  }
  // Beside the embedded target on a GPU, a round of that small model costs about what the drafter's
  // block does, so long copy alone is faster (h200-spec-eval-tensorfold-code-mlx4-gated.md): there
  // "auto" means none, and an explicit directory runs the drafter on the GPU.
  if (options.load.device != "cpu") return "";
  // The embedded drafter was trained on the embedded target's taps; it means nothing to another model.
  std::error_code ignored;
  const bool is_default_model = fs::equivalent(options.model_dir, default_model_dir(), ignored);
  return is_default_model && fs::is_directory(default_drafter_dir()) ? default_drafter_dir() : "";
}

ModelFacts read_model_facts(const ServingOptions& options) {
  const bool is_dir_read = options.synthetic.empty() || options.needs_tokenizer;  // weights or tokenizer
  if (is_dir_read && !fs::is_directory(options.model_dir))
    fail("the model " + options.model_dir + " is not a directory (give a Hugging Face model directory with "
         "config.json, tokenizer.json and *.safetensors)");
  const ModelConfig config =
      options.synthetic.empty() ? ModelConfig::load(options.model_dir) : synthetic_config(options.synthetic);
  ModelFacts facts;
  facts.model_id = options.synthetic.empty() ? model_id_of(options.model_dir) : options.synthetic;
  facts.model_dir = options.model_dir;
  facts.drafter_dir = resolve_drafter_dir(options);
  facts.uses_mtp = options.drafter == "mtp";
  if (facts.uses_mtp && !options.synthetic.empty())
    fail("a synthetic model has no MTP head; give drafter 'none' or 'auto'");
  facts.vocab_size = config.vocab_size;
  facts.context_length = config.max_position_embeddings;
  facts.device = options.load.device;
  facts.numerics = device_numerics(options.load);
  if (is_dir_read) facts.generation_defaults = read_generation_defaults(options.model_dir);
  return facts;
}

struct ServingStack::Parts {
  ModelFacts facts;
  std::string synthetic;  // the shape, for a synthetic model
  int synthetic_bits = 0;
  mutable std::once_flag identity_once;
  mutable ModelIdentity identity;
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatTemplate chat_template{ChatTemplateFamily::none};
  std::shared_ptr<Model> model;
  std::shared_ptr<DFlashDrafter> drafter;  // null: none
  std::shared_ptr<MtpHead> mtp;            // null: none
  std::shared_ptr<Engine> engine;
};

std::shared_ptr<ServingStack> ServingStack::load(const ServingOptions& options) {
  auto parts = std::make_unique<Parts>();
  parts->facts = read_model_facts(options);
  parts->synthetic = options.synthetic;
  parts->synthetic_bits = options.synthetic_bits;
  parts->tokenizer = load_tokenizer(options);
  if (parts->tokenizer) parts->chat_template = ChatTemplate::from_model_dir(options.model_dir, options.chat_template);
  ModelLoadOptions load = options.load;
  load.keep_mtp_head = parts->facts.uses_mtp;
  parts->model = options.synthetic.empty() ? load_model(options.model_dir, load)
                                           : make_synthetic_model(options.synthetic, options.synthetic_bits, load);
  const int64_t vocab_size = parts->model->config().vocab_size;
  if (parts->tokenizer && parts->tokenizer->n_tokens() > vocab_size)
    fail("the tokenizer in " + options.model_dir + " has " + std::to_string(parts->tokenizer->n_tokens()) +
         " tokens, more than the model's vocabulary of " + std::to_string(vocab_size));
  if (!parts->facts.drafter_dir.empty())
    parts->drafter = load_drafter(parts->facts.drafter_dir, *parts->model, options.load.n_threads);
  if (parts->facts.uses_mtp) parts->mtp = parts->model->load_mtp_head(options.load.n_threads);
  std::shared_ptr<ServingStack> stack(new ServingStack(std::move(parts)));
  if (options.engine) stack->parts_->engine = stack->make_engine(*options.engine);
  return stack;
}

ServingStack::ServingStack(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
ServingStack::~ServingStack() = default;

const ModelFacts& ServingStack::facts() const { return parts_->facts; }
std::shared_ptr<const Tokenizer> ServingStack::tokenizer() const { return parts_->tokenizer; }
std::shared_ptr<Engine> ServingStack::engine() const { return parts_->engine; }
const ChatTemplate& ServingStack::chat_template() const { return parts_->chat_template; }

namespace {

std::string file_sha256(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path.string());
  Sha256 hasher;
  std::vector<char> chunk(size_t(1) << 20);
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    hasher.update(reinterpret_cast<const uint8_t*>(chunk.data()), size_t(in.gcount()));
  }
  return hasher.hex_digest();
}

}  // namespace

// The files K/V depends on: config.json and the weights (the tokenizer only maps text to ids).
const ModelIdentity& ServingStack::identity() const {
  std::call_once(parts_->identity_once, [this] {
    ModelIdentity& identity = parts_->identity;
    identity.model = parts_->facts.model_id;
    if (!parts_->synthetic.empty()) {
      identity.files = {{"synthetic", parts_->synthetic + " bits " + std::to_string(parts_->synthetic_bits)}};
      return;
    }
    for (const auto& entry : std::filesystem::directory_iterator(parts_->facts.model_dir)) {
      const std::string name = entry.path().filename().string();
      const bool is_weights = entry.path().extension() == ".safetensors";
      if (entry.is_regular_file() && (name == "config.json" || is_weights))
        identity.files.emplace_back(name, file_sha256(entry.path()));
    }
    std::sort(identity.files.begin(), identity.files.end());
  });
  return parts_->identity;
}

std::shared_ptr<Engine> ServingStack::make_engine(const EngineOptions& options) const {
  EngineOptions named = options;
  if (named.model_id.empty()) named.model_id = parts_->facts.model_dir + "#" + parts_->facts.model_id;
  if (named.numerics.empty()) named.numerics = parts_->facts.numerics;
  return std::make_shared<Engine>(named, parts_->model, parts_->tokenizer, parts_->drafter, parts_->mtp);
}

}  // namespace tf
