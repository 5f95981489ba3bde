// PCRE2-backed Split steps (UTF + UCP so \p{L}, \s and (?i) are Unicode-aware, JIT when the
// library has it) and validation of the ByteLevel step.
#define PCRE2_CODE_UNIT_WIDTH 8

#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/file_error.h"

namespace tf {

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// The White_Space property as a class body (utf8::is_unicode_whitespace's set): what \s means to
// the tokenizers library's regex. PCRE2's \s adds U+180E (its \h list), which would split text
// there that the reference keeps whole.
constexpr const char* kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// `pattern` with each \s and \S spelled as the White_Space class (a \S inside a class stays:
// a class cannot hold a negated one).
std::string with_white_space_classes(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      else if (next == 'S' && !in_class) out += "[^" + std::string(kWhiteSpace) + "]";
      else out += {c, next};
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& source_pattern, const std::string& file_path)
    : compiled_(std::make_unique<Compiled>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const auto compile = [&](const std::string& pattern) {
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                         &error_code, &error_offset, nullptr);
  };
  compiled_->code = compile(with_white_space_classes(source_pattern));
  if (compiled_->code == nullptr) {
    // The error as the file's own pattern gives it (an offset into what the file says).
    if (pcre2_code* original = compile(source_pattern)) pcre2_code_free(original);
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail_in_file(file_path, "pre_tokenizer.pattern.Regex",
            "cannot compile at offset " + std::to_string(error_offset) + ": " + reinterpret_cast<char*>(message));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  // Match data is per call so that one tokenizer can encode on many threads at once.
  pcre2_match_data* match_data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_begin = 0;
  for (size_t from = 0; from <= text.size();) {
    // The text was validated once by the caller, so PCRE2 need not check it on every call.
    const int result = pcre2_match(compiled_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK,
                                   match_data, nullptr);
    if (result == PCRE2_ERROR_NOMATCH) break;
    if (result < 0) {
      // A resource limit: failing beats silently tokenizing differently from the reference.
      pcre2_match_data_free(match_data);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(result, message, sizeof(message));
      fail(std::string("tokenizer regex failed on the input: ") + reinterpret_cast<char*>(message));
    }
    const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(match_data);
    const size_t begin = offsets[0], end = offsets[1];
    if (end == begin) {  // an empty match splits nothing; step over one character
      from = end + 1;
      while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
      continue;
    }
    if (begin > gap_begin) pieces.push_back(text.substr(gap_begin, begin - gap_begin));
    pieces.push_back(text.substr(begin, end - begin));
    gap_begin = from = end;
  }
  if (gap_begin < text.size()) pieces.push_back(text.substr(gap_begin));
  pcre2_match_data_free(match_data);
}

PreTokenizer::PreTokenizer(const nlohmann::json& config, const std::string& file_path) {
  if (!config.is_object()) fail_in_file(file_path, "pre_tokenizer", "missing or not an object");
  std::vector<nlohmann::json> steps;
  if (string_member(config, "type", "", file_path, "pre_tokenizer.type") == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array()) {
      fail_in_file(file_path, "pre_tokenizer.pretokenizers", "missing or not an array");
    }
    steps.assign(config["pretokenizers"].begin(), config["pretokenizers"].end());
  } else {
    steps.push_back(config);
  }
  bool has_byte_level = false;
  for (const nlohmann::json& step : steps) {
    const std::string type =
        step.is_object() ? string_member(step, "type", "", file_path, "pre_tokenizer.pretokenizers[].type") : "";
    if (type == "Split") {
      if (has_byte_level) fail_in_file(file_path, "pre_tokenizer", "Split after ByteLevel is not supported");
      if (!step.contains("pattern") || !step["pattern"].is_object() || !step["pattern"].contains("Regex") ||
          !step["pattern"]["Regex"].is_string()) {
        fail_in_file(file_path, "pre_tokenizer.pattern", "only {\"Regex\": ...} patterns are supported");
      }
      if (string_member(step, "behavior", "", file_path, "pre_tokenizer.behavior") != "Isolated") fail_in_file(file_path, "pre_tokenizer.behavior", "only Isolated is supported");
      if (bool_member(step, "invert", false, file_path, "pre_tokenizer.invert")) fail_in_file(file_path, "pre_tokenizer.invert", "only false is supported");
      splitters_.push_back(std::make_unique<RegexSplitter>(step["pattern"]["Regex"].get<std::string>(), file_path));
    } else if (type == "ByteLevel") {
      if (bool_member(step, "add_prefix_space", false, file_path, "pre_tokenizer.add_prefix_space")) fail_in_file(file_path, "pre_tokenizer.add_prefix_space", "only false is supported");
      if (bool_member(step, "use_regex", true, file_path, "pre_tokenizer.use_regex")) fail_in_file(file_path, "pre_tokenizer.use_regex", "only false is supported");
      has_byte_level = true;
    } else {
      fail_in_file(file_path, "pre_tokenizer.type", "unsupported pre-tokenizer type '" + type + "'");
    }
  }
  if (!has_byte_level) fail_in_file(file_path, "pre_tokenizer", "a ByteLevel step is required (byte-level BPE)");
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::vector<std::string_view> current{text}, next;
  for (const auto& splitter : splitters_) {
    next.clear();
    for (std::string_view piece : current) splitter->split(piece, next);
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace tf
