// Grammar states along accepted tokens and draft branches, and each verify row's mask.
#include "engine/lane_constraint.h"

#include <algorithm>

#include "core/error.h"
#include "engine/engine_impl.h"
#include "tokenizer/tokenizer.h"

namespace tf {

std::optional<std::pair<std::string, std::string>> check_constraints(const GenerationRequest& request, int64_t n_vocab,
                                                                     bool has_tokenizer) {
  const TokenConstraints& c = request.constraints;
  auto outside = [&](int32_t id) { return id < 0 || id >= n_vocab; };
  for (const auto& [token, bias] : c.logit_bias)
    if (outside(token))
      return std::pair{std::string("logit_bias"), "token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                                                      std::to_string(n_vocab - 1) + ")"};
  for (int32_t token : c.stop_token_ids)
    if (outside(token))
      return std::pair{std::string("stop_token_ids"),
                       "token id " + std::to_string(token) + " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")"};
  if (c.min_tokens < 0 || c.min_tokens > request.max_tokens)
    return std::pair{std::string("min_tokens"), "min_tokens (" + std::to_string(c.min_tokens) +
                                                    ") must be between 0 and max_tokens (" +
                                                    std::to_string(request.max_tokens) + ")"};
  if (c.grammar && !has_tokenizer)
    return std::pair{std::string("response_format"), "structured output needs the model's tokenizer"};
  if (c.grammar && request.ignore_eos)
    return std::pair{std::string("ignore_eos"), "ignore_eos cannot be combined with a grammar or response_format: "
                                                "a reply that completes its grammar must end"};
  return std::nullopt;
}

std::unique_ptr<LaneConstraint> Engine::Impl::make_constraint(const GenerationRequest& request) {
  const TokenConstraints& c = request.constraints;
  if (c.is_empty()) return nullptr;
  const int64_t n_vocab = model->config().vocab_size;
  if (c.grammar && !grammar_tokens) grammar_tokens = grammar_vocabulary(*tokenizer, n_vocab);
  return std::make_unique<LaneConstraint>(c, c.grammar ? grammar_tokens : nullptr, eos_ids, n_vocab);
}

std::shared_ptr<const TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer, int64_t n_vocab) {
  std::vector<std::string> bytes(size_t(std::max<int64_t>(n_vocab, 0)));
  const int64_t n_known = std::min(n_vocab, tokenizer.n_tokens());
  for (int32_t id = 0; id < int32_t(n_known); ++id)
    if (!tokenizer.is_special(id)) bytes[size_t(id)] = tokenizer.token_bytes(id);
  return std::make_shared<const TokenVocabulary>(std::move(bytes));
}

LaneConstraint::LaneConstraint(const TokenConstraints& constraints, std::shared_ptr<const TokenVocabulary> vocabulary,
                               std::vector<int32_t> end_ids, int64_t n_vocab)
    : bias_(constraints.logit_bias),
      min_tokens_(constraints.min_tokens),
      stop_ids_(constraints.stop_token_ids),
      end_ids_(std::move(end_ids)),
      n_vocab_(n_vocab) {
  end_ids_.insert(end_ids_.end(), stop_ids_.begin(), stop_ids_.end());
  if (!constraints.grammar) return;
  if (!vocabulary) fail_internal("a grammar needs the tokenizer's vocabulary");
  matcher_.emplace(constraints.grammar, std::move(vocabulary));
  try {
    state_ = matcher_->start();
  } catch (const Error& error) {
    failure_ = error.what();
  }
}

bool LaneConstraint::is_stop_token(int32_t token) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end();
}

void LaneConstraint::prune(DraftTree* tree) {
  node_states_.clear();
  if (!matcher_ || failure_) {
    if (failure_) tree->clear();
    return;
  }
  std::vector<uint8_t> keep(size_t(tree->size()), 0);
  std::vector<GrammarState> states(size_t(tree->size()));
  for (int32_t node = 0; node < tree->size(); ++node) {
    const int32_t parent = tree->parents[size_t(node)];
    if (parent >= 0 && !keep[size_t(parent)]) continue;
    const GrammarState& from = parent < 0 ? state_ : states[size_t(parent)];
    // A draft the grammar cannot follow (too ambiguous there, or for its row's mask) is dropped
    // like a dead one: only the reply's own state may fail the reply, or a draft would turn a reply
    // into an error. (The reply that takes that token anyway fails at it, drafted or not.)
    try {
      states[size_t(node)] = matcher_->advance_token(from, tree->tokens[size_t(node)]);
      keep[size_t(node)] = !states[size_t(node)].is_dead();
      if (keep[size_t(node)]) matcher_->allowed_tokens(states[size_t(node)]);  // its row's mask, later
    } catch (const Error&) {
      keep[size_t(node)] = 0;
    }
  }
  for (size_t node = 0; node < states.size(); ++node)
    if (keep[node]) node_states_.push_back(std::move(states[node]));
  tree->retain(keep);
}

bool LaneConstraint::row_mask(int32_t node, int64_t completion_index, uint32_t* mask) {
  const bool is_end_banned = completion_index < min_tokens_;
  if (!matcher_ && !is_end_banned) return false;
  const int64_t n = n_words();
  auto set = [&](int32_t token, bool on) {
    if (token < 0 || token >= n_vocab_) return;
    if (on)
      mask[token >> 5] |= 1u << (token & 31);
    else
      mask[token >> 5] &= ~(1u << (token & 31));
  };
  std::fill_n(mask, n, 0u);
  bool is_complete = true;
  if (matcher_ && !failure_) {
    try {
      const GrammarState& state = state_of(node);
      const std::vector<uint32_t>& allowed = matcher_->allowed_tokens(state);
      std::copy_n(allowed.begin(), std::min<int64_t>(n, int64_t(allowed.size())), mask);
      is_complete = state.is_complete;
    } catch (const Error& error) {
      failure_ = error.what();
    }
  } else if (!matcher_) {
    std::fill_n(mask, n, ~0u);
    if (n_vocab_ % 32) mask[n - 1] = (1u << (n_vocab_ % 32)) - 1;
  }
  if (failure_) is_complete = true;  // the lane ends at once; any end token will do
  for (int32_t token : end_ids_) set(token, is_complete && !is_end_banned);
  // min_tokens never outlasts a grammar: where only an end may follow, it may.
  if (std::all_of(mask, mask + n, [](uint32_t w) { return w == 0; }))
    for (int32_t token : end_ids_) set(token, true);
  return true;
}

void LaneConstraint::accept(int32_t token) {
  if (!matcher_ || failure_ || std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) return;
  try {
    state_ = matcher_->advance_token(state_, token);
  } catch (const Error& error) {
    failure_ = error.what();
  }
  if (!failure_ && state_.is_dead()) fail_internal("an accepted token left its grammar");
}

}  // namespace tf
