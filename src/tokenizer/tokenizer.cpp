// Tokenizer::from_file: the tokenizer.json pipeline (added tokens, NFC, pre-tokenizer, BPE,
// ByteLevel decoder) and the streaming decoder.
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <unordered_map>

#include "core/error.h"
#include "core/json_error_text.h"
#include "core/regular_file.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/file_error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf {
namespace {

const nlohmann::json& require(const nlohmann::json& root, const char* field, const std::string& file_path) {
  if (!root.contains(field) || root[field].is_null()) fail_in_file(file_path, field, "missing");
  return root[field];
}

// The "type" of a pipeline component; "" when it is not an object or has none.
std::string type_of(const nlohmann::json& component, const std::string& file_path, const std::string& field) {
  return component.is_object() ? string_member(component, "type", "", file_path, field + ".type") : std::string();
}

// Only NFC (alone or in a Sequence) is supported; returns whether text is normalized at all.
bool read_normalizer(const nlohmann::json& root, const std::string& file_path) {
  if (!root.contains("normalizer") || root["normalizer"].is_null()) return false;
  const nlohmann::json& normalizer = root["normalizer"];
  const std::string type = type_of(normalizer, file_path, "normalizer");
  if (type == "NFC") return true;
  if (type == "Sequence" && normalizer.contains("normalizers") && normalizer["normalizers"].is_array()) {
    for (const nlohmann::json& step : normalizer["normalizers"]) {
      const std::string step_type = type_of(step, file_path, "normalizer.normalizers[]");
      if (step_type != "NFC") fail_in_file(file_path, "normalizer.normalizers", "unsupported normalizer type '" + step_type + "'");
    }
    return !normalizer["normalizers"].empty();
  }
  fail_in_file(file_path, "normalizer.type", "unsupported normalizer type '" + type + "' (only NFC)");
}

// ByteLevel leaves ids untouched (trim_offsets only moves offsets), so null and ByteLevel are accepted.
void check_byte_level_or_null(const nlohmann::json& root, const char* field, const std::string& file_path,
                              bool is_null_allowed) {
  const bool is_null = !root.contains(field) || root[field].is_null();
  if (is_null && is_null_allowed) return;
  const std::string type = is_null ? "null" : type_of(root[field], file_path, field);
  if (type != "ByteLevel") fail_in_file(file_path, std::string(field) + ".type", "unsupported type '" + type + "' (only ByteLevel)");
}

std::vector<AddedToken> read_added_tokens(const nlohmann::json& root, const std::string& file_path) {
  std::vector<AddedToken> tokens;
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return tokens;
  if (!root["added_tokens"].is_array()) fail_in_file(file_path, "added_tokens", "not an array");
  const nlohmann::json& entries = root["added_tokens"];
  for (size_t i = 0; i < entries.size(); ++i) {
    const nlohmann::json& entry = entries[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object()) fail_in_file(file_path, field, "must be an object with an id and a content");
    const nlohmann::json* id = member(entry, "id");
    const nlohmann::json* content = member(entry, "content");
    if (!id || !content) fail_in_file(file_path, field, "each entry needs an id and a content");
    if (!content->is_string())
      fail_in_file(file_path, field + ".content", "must be a string, got " + std::string(content->type_name()));
    AddedToken token;
    token.id = token_id_value(*id, file_path, field + ".id");
    token.content = content->get<std::string>();
    token.is_special = bool_member(entry, "special", false, file_path, field + ".special");
    token.lstrip = bool_member(entry, "lstrip", false, file_path, field + ".lstrip");
    token.rstrip = bool_member(entry, "rstrip", false, file_path, field + ".rstrip");
    token.single_word = bool_member(entry, "single_word", false, file_path, field + ".single_word");
    token.normalized = bool_member(entry, "normalized", !token.is_special, file_path, field + ".normalized");
    tokens.push_back(std::move(token));
  }
  return tokens;
}

std::vector<AddedToken> with_normalized_flag(const std::vector<AddedToken>& tokens, bool normalized) {
  std::vector<AddedToken> chosen;
  for (const AddedToken& token : tokens) {
    if (token.normalized == normalized) chosen.push_back(token);
  }
  return chosen;
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const nlohmann::json& root, const std::string& file_path,
              const std::vector<AddedToken>& added_tokens)
      : is_nfc_(read_normalizer(root, file_path)),
        pre_tokenizer_(require(root, "pre_tokenizer", file_path), file_path),
        bpe_(require(root, "model", file_path), file_path),
        raw_added_tokens_(with_normalized_flag(added_tokens, false)),
        normalized_added_tokens_(with_normalized_flag(added_tokens, true)) {
    check_byte_level_or_null(root, "decoder", file_path, false);
    check_byte_level_or_null(root, "post_processor", file_path, true);
    int32_t max_id = -1;
    for (const auto& [token, id] : bpe_.vocab()) max_id = std::max(max_id, id);
    for (const AddedToken& token : added_tokens) max_id = std::max(max_id, token.id);
    // Tables are indexed by id, so ids must be about as dense as the tokens the file defines.
    const int64_t n_defined = int64_t(bpe_.vocab().size() + added_tokens.size());
    if (int64_t(max_id) >= 2 * n_defined + 1024)
      fail_in_file(file_path, "model.vocab / added_tokens",
                   "token id " + std::to_string(max_id) + " is far past the " + std::to_string(n_defined) +
                       " tokens the file defines (ids must be dense)");
    bytes_of_id_.resize(static_cast<size_t>(max_id) + 1);
    is_special_.resize(static_cast<size_t>(max_id) + 1, false);
    for (const auto& [token, id] : bpe_.vocab()) bytes_of_id_[id] = byte_level::decode(token);
    // Added tokens go through the ByteLevel decoder too, as in the reference.
    for (const AddedToken& token : added_tokens) {
      bytes_of_id_[token.id] = byte_level::decode(token.content);
      is_special_[token.id] = token.is_special;
      added_ids_[token.content] = token.id;
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override { return encode(text, {}); }

  std::vector<int32_t> encode(std::string_view text, const std::vector<TextSpan>& literal_spans) const override {
    std::string repaired;
    if (!is_valid_utf8(text)) {
      if (!literal_spans.empty()) fail_internal("literal spans over text that is not valid UTF-8");
      repaired = utf8::replace_invalid(text);
      text = repaired;
    }
    std::vector<int32_t> ids;
    std::vector<TextSegment> segments;
    const auto overlaps_literal = [&](size_t begin, size_t end) {
      auto it = std::lower_bound(literal_spans.begin(), literal_spans.end(), begin,
                                 [](const TextSpan& span, size_t at) { return span.end <= at; });
      return it != literal_spans.end() && it->begin < end;
    };
    const AddedTokenMatcher::SpecialFilter is_special_allowed =
        literal_spans.empty() ? AddedTokenMatcher::SpecialFilter()
                              : [&](size_t begin, size_t end) { return !overlaps_literal(begin, end); };
    raw_added_tokens_.split(text, segments, is_special_allowed);
    for (const TextSegment& segment : segments) {
      if (segment.added_token_id >= 0) {
        ids.push_back(segment.added_token_id);
      } else {
        const size_t begin = size_t(segment.text.data() - text.data());
        encode_unmatched(segment.text, !literal_spans.empty() && overlaps_literal(begin, begin + segment.text.size()), ids);
      }
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < bytes_of_id_.size() ? bytes_of_id_[id] : std::string();
  }

  int32_t token_id(std::string_view content) const override {
    const std::string key(content);
    if (const auto found = added_ids_.find(key); found != added_ids_.end()) return found->second;
    if (const auto found = bpe_.vocab().find(key); found != bpe_.vocab().end()) return found->second;
    return -1;
  }

  bool is_special(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < is_special_.size() && is_special_[id];
  }

  int64_t n_tokens() const override { return static_cast<int64_t>(bytes_of_id_.size()); }

 private:
  // Text outside raw-matched added tokens: normalize, then match normalized added tokens,
  // then pre-tokenize and merge.
  // Normalization moves offsets, so a segment touching a literal span matches no special token.
  void encode_unmatched(std::string_view text, bool is_literal, std::vector<int32_t>& ids) const {
    const std::string normalized = is_nfc_ ? nfc(text) : std::string(text);
    std::vector<TextSegment> segments;
    if (normalized_added_tokens_.is_empty()) {
      segments.push_back({normalized, -1});
    } else {
      normalized_added_tokens_.split(normalized, segments,
                                     is_literal ? [](size_t, size_t) { return false; } : AddedTokenMatcher::SpecialFilter());
    }
    std::vector<std::string_view> pieces;
    for (const TextSegment& segment : segments) {
      if (segment.added_token_id >= 0) {
        ids.push_back(segment.added_token_id);
        continue;
      }
      pieces.clear();
      pre_tokenizer_.split(segment.text, pieces);
      for (std::string_view piece : pieces) bpe_.encode_word(piece, ids);
    }
  }

  bool is_nfc_;
  PreTokenizer pre_tokenizer_;
  BpeModel bpe_;
  AddedTokenMatcher raw_added_tokens_;         // matched in the raw text
  AddedTokenMatcher normalized_added_tokens_;  // matched after normalization
  std::vector<std::string> bytes_of_id_;
  std::vector<bool> is_special_;
  std::unordered_map<std::string, int32_t> added_ids_;
};

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::from_file(const std::string& tokenizer_json_path) {
  require_regular_file(tokenizer_json_path, "the tokenizer file");
  std::ifstream file(tokenizer_json_path, std::ios::binary);
  if (!file) fail("tokenizer file " + tokenizer_json_path + ": cannot be opened");
  file.seekg(0, std::ios::end);
  const std::streamoff size = file.tellg();
  if (size < 0) fail("tokenizer file " + tokenizer_json_path + ": cannot be read");
  std::string contents(static_cast<size_t>(size), '\0');
  file.seekg(0);
  file.read(contents.data(), size);
  if (!file) fail("tokenizer file " + tokenizer_json_path + ": cannot be read");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(contents);
  } catch (const nlohmann::json::exception& e) {
    fail("tokenizer file " + tokenizer_json_path + ": not valid JSON: " + json_error_text(e.what()));
  }
  if (!root.is_object()) fail("tokenizer file " + tokenizer_json_path + ": not a JSON object");
  // Every field is read with a type check that names it, so a JSON library exception escaping
  // here is a bug (an internal error), not the file's fault.
  return std::make_shared<HfTokenizer>(root, tokenizer_json_path, read_added_tokens(root, tokenizer_json_path));
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_.text_bytes(id, skips_special_tokens_);
  const size_t complete = complete_utf8_prefix(pending_);
  std::string out = utf8::replace_invalid(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::replace_invalid(pending_);
  pending_.clear();
  return out;
}

}  // namespace tf
