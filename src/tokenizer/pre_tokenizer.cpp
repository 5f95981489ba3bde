// PCRE2-backed Split steps (UTF + UCP so (?i) and the classes left to PCRE2 are Unicode-aware, JIT
// when the library has it; \s and \p{..} categories from the reference's tables) and validation of
// the ByteLevel step.
#define PCRE2_CODE_UNIT_WIDTH 8

#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <mutex>
#include <span>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/file_error.h"
#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace tf {

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

using unicode_classes::CodePointRange;

// The scalar values not in `ranges` (surrogates are never in a class and cannot be written in one).
std::vector<CodePointRange> complement(std::span<const CodePointRange> ranges) {
  std::vector<CodePointRange> out;
  const auto add = [&](char32_t first, char32_t last) {
    if (first < 0xD800 && last > 0xDFFF) {
      out.push_back({first, 0xD7FF});
      out.push_back({0xE000, last});
    } else if (first >= 0xD800 && first <= 0xDFFF) {
      if (last >= 0xE000) out.push_back({0xE000, last});
    } else if (last >= 0xD800 && last <= 0xDFFF) {
      out.push_back({first, 0xD7FF});
    } else {
      out.push_back({first, last});
    }
  };
  char32_t next = 0;
  for (const CodePointRange& range : ranges) {
    if (range.first > next) add(next, range.first - 1);
    next = range.last + 1;
  }
  if (next <= 0x10FFFF) add(next, 0x10FFFF);
  return out;
}

// The code points of `a` not in `b` (both sorted and disjoint).
std::vector<CodePointRange> difference(std::span<const CodePointRange> a, std::span<const CodePointRange> b) {
  const std::vector<CodePointRange> not_b = complement(b);
  std::vector<CodePointRange> out;
  for (size_t i = 0, j = 0; i < a.size() && j < not_b.size();) {
    const char32_t first = std::max(a[i].first, not_b[j].first), last = std::min(a[i].last, not_b[j].last);
    if (first <= last) out.push_back({first, last});
    (a[i].last < not_b[j].last ? i : j)++;
  }
  return out;
}

std::string class_body(std::span<const CodePointRange> ranges) {
  std::string body;
  char hex[32];
  for (const CodePointRange& range : ranges) {
    if (range.first == range.last) std::snprintf(hex, sizeof(hex), "\\x{%X}", unsigned(range.first));
    else std::snprintf(hex, sizeof(hex), "\\x{%X}-\\x{%X}", unsigned(range.first), unsigned(range.last));
    body += hex;
  }
  return body;
}

// The code points the linked PCRE2's own tables put in \p{name}: the runs its JIT finds in a
// string of every scalar value in order.
std::vector<CodePointRange> find_pcre2_class(std::string_view name) {
  std::string every_scalar_value;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp < 0xD800 || cp > 0xDFFF) utf8::append_codepoint(every_scalar_value, cp);
  }
  const std::string pattern = "\\p{" + std::string(name) + "}+";
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) fail("PCRE2 does not know the Unicode class \\p{" + std::string(name) + "}");
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  pcre2_match_data* match_data = pcre2_match_data_create_from_pattern(code, nullptr);
  const std::string_view text = every_scalar_value;
  std::vector<CodePointRange> runs;
  for (size_t from = 0; pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                                    PCRE2_NO_UTF_CHECK, match_data, nullptr) > 0;) {
    const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(match_data);
    size_t last = offsets[1] - 1;
    while ((static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) --last;
    const auto decode = [&](size_t at) { return utf8::decode_at(text, at, utf8::sequence_at(text, at).length); };
    runs.push_back({decode(offsets[0]), decode(last)});
    from = offsets[1];
  }
  pcre2_match_data_free(match_data);
  pcre2_code_free(code);
  return complement(complement(runs));  // a run across the surrogate gap becomes two ranges
}

// find_pcre2_class, once per name and process (a scan takes milliseconds; a pattern names a class often).
const std::vector<CodePointRange>& pcre2_class(std::string_view name) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<CodePointRange>, std::less<>> found;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = found.find(name);
  if (it == found.end()) it = found.emplace(std::string(name), find_pcre2_class(name)).first;
  return it->second;
}

// How the pattern spells a class the reference's tables define.
struct ReferenceClass {
  std::string_view name;  // the general category, empty for White_Space
  std::span<const CodePointRange> ranges;
};

// A class body that matches `named` as the reference does. For a category, PCRE2's own \p{X} (a
// table lookup, where a long list of explicit ranges costs the JIT a comparison each) plus the code
// points the reference's newer Unicode adds; all explicit ranges if PCRE2 has any the reference lacks.
std::string positive_body(const ReferenceClass& named) {
  if (named.name.empty()) return class_body(named.ranges);
  const std::vector<CodePointRange>& pcre2 = pcre2_class(named.name);
  if (!difference(pcre2, named.ranges).empty()) return class_body(named.ranges);
  return "\\p{" + std::string(named.name) + "}" + class_body(difference(named.ranges, pcre2));
}

// The class an escape names (\s, \p{L}, \pN, \p{^L}, \P{Lu} ...) starting at pattern[i] == '\\', as
// the reference's tables have it, whether it is negated, and the escape's length; a length of 0 when
// the escape names none of these (PCRE2 then reads it itself).
struct NamedClass {
  ReferenceClass named;
  bool is_negated = false;
  size_t length = 0;
};

NamedClass named_class_at(const std::string& pattern, size_t i) {
  const char kind = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
  if (kind == 's' || kind == 'S') return {{"", unicode_classes::white_space()}, kind == 'S', 2};
  if (kind != 'p' && kind != 'P') return {};
  std::string name;
  size_t length = 3;
  if (i + 2 < pattern.size() && pattern[i + 2] == '{') {
    const size_t close = pattern.find('}', i + 3);
    if (close == std::string::npos) return {};
    name = pattern.substr(i + 3, close - i - 3);
    length = close - i + 1;
  } else if (i + 2 < pattern.size()) {
    name = pattern.substr(i + 2, 1);
  }
  bool is_negated = kind == 'P';
  if (!name.empty() && name[0] == '^') {
    is_negated = !is_negated;
    name.erase(0, 1);
  }
  for (const unicode_classes::UnicodeClass& category : unicode_classes::general_categories()) {
    if (category.name == name) return {{category.name, category.ranges}, is_negated, length};
  }
  return {};
}

// `pattern` with \s, \S and the general categories (\p{L}, \P{N} ...) spelled as classes that hold
// what the reference's tables hold: PCRE2's own tables follow its Unicode version, and its \s adds
// U+180E (its \h list), which would split text there that the reference keeps whole. Outside a
// class, an (?i) scope leaves a category as it is (as in the reference and in PCRE2's own \p),
// whereas explicit ranges would be case-folded, so there the class is wrapped in (?-i:...).
std::string with_reference_classes(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  bool is_caseless = false;
  std::vector<bool> enclosing_caseless;  // one per open group, the flag to restore at its ')'
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const NamedClass escape = named_class_at(pattern, i);
      if (escape.length == 0) {
        out += {c, pattern[++i]};
      } else if (in_class) {
        out += escape.is_negated ? class_body(complement(escape.named.ranges)) : positive_body(escape.named);
        i += escape.length - 1;
      } else {
        const std::string body = (escape.is_negated ? "[^" : "[") + positive_body(escape.named) + "]";
        out += is_caseless ? "(?-i:" + body + ")" : body;
        i += escape.length - 1;
      }
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == '(') {
      // Option letters: "(?i:" opens a caseless group, "(?i)" makes the rest of this group caseless.
      size_t end = i + 2;
      bool is_on = true, flag = is_caseless;
      if (i + 1 < pattern.size() && pattern[i + 1] == '?') {
        for (; end < pattern.size() && (std::isalpha(static_cast<unsigned char>(pattern[end])) ||
                                        pattern[end] == '-' || pattern[end] == '^');
             ++end) {
          if (pattern[end] == '-') is_on = false;
          else if (pattern[end] == '^') flag = false;
          else if (pattern[end] == 'i') flag = is_on;
        }
      }
      const bool has_options = end > i + 2 && end < pattern.size() && (pattern[end] == ':' || pattern[end] == ')');
      if (!has_options || pattern[end] == ':') enclosing_caseless.push_back(is_caseless);
      if (has_options) {
        is_caseless = flag;
        out += pattern.substr(i, end - i + 1);
        i = end;
      } else {
        out += c;
      }
      continue;
    }
    if (c == ')' && !enclosing_caseless.empty()) {
      is_caseless = enclosing_caseless.back();
      enclosing_caseless.pop_back();
    }
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
  compiled_->code = compile(with_reference_classes(source_pattern));
  if (compiled_->code == nullptr) {
    const auto message_of = [](int code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof(message));
      return std::string(reinterpret_cast<char*>(message));
    };
    const std::string spelled_out_error = message_of(error_code);
    // The error as the file's own pattern gives it (an offset into what the file says); where that
    // compiles, its Unicode classes spelled out as the reference's did not (a pattern too large).
    if (pcre2_code* original = compile(source_pattern)) {
      pcre2_code_free(original);
      fail_in_file(file_path, "pre_tokenizer.pattern.Regex",
                   "cannot compile once its Unicode classes are spelled out as the reference tokenizer's: " +
                       spelled_out_error);
    }
    fail_in_file(file_path, "pre_tokenizer.pattern.Regex",
                 "cannot compile at offset " + std::to_string(error_offset) + ": " + message_of(error_code));
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
