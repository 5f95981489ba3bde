// BPE merging by rank with a heap, so long words (runs of spaces, minified code) stay linear-log.
#include "tokenizer/bpe.h"

#include <nlohmann/json.hpp>

#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/file_error.h"

namespace tf {
namespace {

bool is_unset_or(const nlohmann::json& model, const char* key, const nlohmann::json& allowed) {
  return !model.contains(key) || model[key].is_null() || model[key] == allowed;
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& file_path) {
  if (!model.is_object()) fail_in_file(file_path, "model", "expected an object");
  const std::string type = string_member(model, "type", "BPE", file_path, "model.type");
  if (type != "BPE") fail_in_file(file_path, "model.type", "unsupported model type '" + type + "' (only BPE)");
  if (!is_unset_or(model, "continuing_subword_prefix", "") || !is_unset_or(model, "end_of_word_suffix", "")) {
    fail_in_file(file_path, "model", "continuing_subword_prefix / end_of_word_suffix are not supported");
  }
  if (!is_unset_or(model, "byte_fallback", false)) fail_in_file(file_path, "model.byte_fallback", "not supported");
  if (!is_unset_or(model, "dropout", 0.0)) fail_in_file(file_path, "model.dropout", "not supported");
  is_ignore_merges_ = bool_member(model, "ignore_merges", false, file_path, "model.ignore_merges");

  if (!model.contains("vocab") || !model["vocab"].is_object()) fail_in_file(file_path, "model.vocab", "missing or not an object");
  vocab_.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) {
    vocab_.emplace(token, token_id_value(id, file_path, "model.vocab[\"" + token + "\"]"));
  }
  for (int b = 0; b < 256; ++b) {
    const auto found = vocab_.find(byte_level::char_of_byte(static_cast<uint8_t>(b)));
    id_of_byte_[b] = found == vocab_.end() ? -1 : found->second;
  }

  if (!model.contains("merges") || !model["merges"].is_array()) fail_in_file(file_path, "model.merges", "missing or not an array");
  const auto id_of = [&](const std::string& token) {
    const auto found = vocab_.find(token);
    if (found == vocab_.end()) fail_in_file(file_path, "model.merges", "token '" + token + "' is not in the vocab");
    return found->second;
  };
  const nlohmann::json& merges = model["merges"];
  merges_.reserve(merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& merge = merges[rank];
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail_in_file(file_path, "model.merges", "merge '" + line + "' is not two tokens separated by a space");
      }
      left.assign(line, 0, space);
      right.assign(line, space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get_ref<const std::string&>();
      right = merge[1].get_ref<const std::string&>();
    } else {
      fail_in_file(file_path, "model.merges", "entry " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const int32_t left_id = id_of(left), right_id = id_of(right);
    left += right;
    merges_.emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), id_of(left)});  // lowest rank wins
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  const bool is_cacheable = word.size() <= max_cached_word_bytes;
  if (is_cacheable) {
    std::lock_guard lock(cache_mutex_);
    const auto found = cache_.find(std::string(word));
    if (found != cache_.end()) {
      ids.insert(ids.end(), found->second.begin(), found->second.end());
      return;
    }
  }
  std::vector<int32_t> word_ids;
  merge_word(word, word_ids);
  ids.insert(ids.end(), word_ids.begin(), word_ids.end());
  if (is_cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= max_cached_words) cache_.clear();
    cache_.emplace(std::string(word), std::move(word_ids));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (is_ignore_merges_) {
    const auto found = vocab_.find(byte_level::encode(word));
    if (found != vocab_.end()) {
      ids.push_back(found->second);
      return;
    }
  }
  // Symbols form a linked list; a merged symbol keeps its left position, so positions stay ordered.
  struct Symbol {
    int32_t id, prev, next;
    bool is_alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const int32_t id = id_of_byte_[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // no unk token in byte-level vocabularies: the byte is dropped
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank, left, right;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const auto found = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (found != merges_.end()) heap.push({found->second.rank, left, right});
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) push_pair(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.left];
    if (!left.is_alive || left.next != top.right) continue;  // stale: a neighbour already merged
    const auto found = merges_.find(pair_key(left.id, symbols[top.right].id));
    if (found == merges_.end() || found->second.rank != top.rank) continue;
    Symbol& right = symbols[top.right];
    left.id = found->second.merged_id;
    left.next = right.next;
    right.is_alive = false;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    push_pair(left.prev, top.left);
    push_pair(top.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace tf
