// GBNF parsing into a byte-level grammar: literals become byte runs, code-point classes become
// alternatives of UTF-8 byte-range sequences, groups and repetitions become generated rules.
#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"

namespace tf {
namespace {

using Sequence = std::vector<GrammarSymbol>;
using CodeRange = std::pair<uint32_t, uint32_t>;  // inclusive

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int64_t kMaxRepeat = 1000;    // {m,n} bounds above this are refused
constexpr int kMaxGroupDepth = 256;     // ( groups ) nested deeper than this are refused: the parser recurses

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

// Splits [lo, hi] (one UTF-8 length) until each piece is a product of per-byte ranges, and emits
// each piece as its first and last encodings.
void split_utf8(uint32_t lo, uint32_t hi, std::vector<std::pair<std::string, std::string>>* out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string first, last;
  append_utf8(lo, &first);
  append_utf8(hi, &last);
  out->push_back({first, last});
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view start) : text_(text), start_(start) {}

  std::shared_ptr<const Grammar> run() {
    skip_space(true);
    while (pos_ < text_.size()) {
      const std::string name = parse_name();
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") error("expected '::=' after the rule name '" + name + "'");
      pos_ += 3;
      const uint32_t rule = rule_id(name);
      if (defined_[rule]) error("the rule '" + name + "' is defined twice");
      defined_[rule] = true;
      rules_[rule] = parse_alternatives(name, 0);
      skip_space(true);
    }
    auto root = names_.find(std::string(start_));
    if (root == names_.end() || !defined_[root->second])
      throw Error("grammar: no '" + std::string(start_) + "' rule");
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) throw Error("grammar: the rule '" + rule_names_[r] + "' is used but not defined");
    auto grammar = std::make_shared<Grammar>();
    grammar->root = root->second;
    grammar->rule_names = rule_names_;
    grammar->byte_sets = byte_sets_;
    for (const auto& alternatives : rules_) {
      grammar->alternatives.emplace_back();
      for (const Sequence& sequence : alternatives) {
        grammar->alternatives.back().push_back(uint32_t(grammar->code.size()));
        grammar->code.insert(grammar->code.end(), sequence.begin(), sequence.end());
        grammar->code.push_back({GrammarSymbol::end, 0});
      }
    }
    check_left_recursion(*grammar);
    return grammar;
  }

 private:
  [[noreturn]] void error(const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw Error("grammar: " + message + " (line " + std::to_string(line) + ", column " + std::to_string(column) + ")");
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  static bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

  // Spaces and comments; newlines only when allowed.
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  // After a newline at the top level: does a new rule (or the end) start here?
  bool next_is_rule_start() {
    const size_t saved = pos_;
    skip_space(true);
    bool is_start = at_end();
    if (!is_start) {
      size_t p = pos_;
      while (p < text_.size() && is_name_char(text_[p])) ++p;
      if (p > pos_) {
        while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
        is_start = text_.substr(p, 3) == "::=";
      }
    }
    pos_ = saved;
    return is_start;
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) error("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, is_new] = names_.try_emplace(name, uint32_t(rules_.size()));
    if (is_new) {
      rules_.emplace_back();
      rule_names_.push_back(name);
      defined_.push_back(false);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& parent, std::vector<Sequence> alternatives) {
    const uint32_t rule = uint32_t(rules_.size());
    rules_.push_back(std::move(alternatives));
    rule_names_.push_back(parent + "_" + std::to_string(rule));
    defined_.push_back(true);
    return rule;
  }

  uint32_t byte_set(uint8_t lo, uint8_t hi) {
    std::array<uint64_t, 4> set{};
    for (unsigned b = lo; b <= hi; ++b) set[b >> 6] |= uint64_t(1) << (b & 63);
    auto it = std::find(byte_sets_.begin(), byte_sets_.end(), set);
    if (it != byte_sets_.end()) return uint32_t(it - byte_sets_.begin());
    byte_sets_.push_back(set);
    return uint32_t(byte_sets_.size() - 1);
  }

  std::vector<Sequence> parse_alternatives(const std::string& rule, int depth) {
    std::vector<Sequence> alternatives;
    alternatives.push_back(parse_sequence(rule, depth));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alternatives.push_back(parse_sequence(rule, depth));
    }
    return alternatives;
  }

  Sequence parse_sequence(const std::string& rule, int depth) {
    Sequence sequence;
    for (;;) {
      skip_space(depth > 0);
      if (peek() == '\n') {  // top level: a newline ends the rule unless the next line goes on with it
        if (next_is_rule_start()) return sequence;
        skip_space(true);
      }
      const char c = peek();
      if (at_end() || c == '|' || c == ')') return sequence;
      const size_t item_start = sequence.size();
      if (c == '"') {
        ++pos_;
        std::string bytes;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') error("unterminated string literal");
          append_utf8(parse_char(), &bytes);
        }
        ++pos_;
        for (unsigned char b : bytes) sequence.push_back({GrammarSymbol::bytes, byte_set(b, b)});
        if (bytes.empty()) {  // "" matches nothing: an empty group keeps postfix operators well defined
          sequence.push_back({GrammarSymbol::rule, new_rule(rule, {Sequence{}})});
        }
      } else if (c == '[') {
        ++pos_;
        sequence.push_back(parse_class(rule));
      } else if (c == '.') {
        ++pos_;
        sequence.push_back(class_symbol(rule, {{0, kMaxCodePoint}}, false));
      } else if (c == '(') {
        if (depth >= kMaxGroupDepth) error("groups nest deeper than " + std::to_string(kMaxGroupDepth) + " levels");
        ++pos_;
        skip_space(true);
        std::vector<Sequence> inner = parse_alternatives(rule, depth + 1);
        skip_space(true);
        if (peek() != ')') error("expected ')'");
        ++pos_;
        sequence.push_back({GrammarSymbol::rule, new_rule(rule, std::move(inner))});
      } else if (is_name_char(c)) {
        sequence.push_back({GrammarSymbol::rule, rule_id(parse_name())});
      } else {
        error(std::string("unexpected character '") + c + "'");
      }
      apply_postfix(rule, item_start, &sequence);
    }
  }

  // A postfix operator applies to the last item (a literal of several bytes becomes one group).
  void apply_postfix(const std::string& rule, size_t item_start, Sequence* sequence) {
    const char c = peek();
    if (c != '*' && c != '+' && c != '?' && c != '{') return;
    GrammarSymbol item = sequence->back();
    if (sequence->size() - item_start > 1) {
      Sequence group(sequence->begin() + int64_t(item_start), sequence->end());
      item = {GrammarSymbol::rule, new_rule(rule, {group})};
    }
    sequence->resize(item_start);
    int64_t min = 0, max = -1;  // -1: unbounded
    ++pos_;
    if (c == '+') min = 1;
    if (c == '?') max = 1;
    if (c == '{') {
      skip_space(false);
      min = parse_count();
      max = min;
      skip_space(false);
      if (peek() == ',') {
        ++pos_;
        skip_space(false);
        max = std::isdigit(static_cast<unsigned char>(peek())) ? parse_count() : -1;
        skip_space(false);
      }
      if (peek() != '}') error("expected '}'");
      ++pos_;
      if (max >= 0 && max < min) error("repetition {m,n} needs m <= n");
    }
    for (int64_t i = 0; i < min; ++i) sequence->push_back(item);
    if (max < 0) {
      // star ::= item star | (empty): right recursion, which the matcher runs without growing its stack
      const uint32_t star = new_rule(rule, {});
      rules_[star] = {Sequence{item, {GrammarSymbol::rule, star}}, Sequence{}};
      sequence->push_back({GrammarSymbol::rule, star});
    } else if (max > min) {
      // up to k more: opt_k ::= item opt_(k-1) | (empty), nested so each count parses one way
      uint32_t optional = new_rule(rule, {Sequence{item}, Sequence{}});
      for (int64_t k = 1; k < max - min; ++k)
        optional = new_rule(rule, {Sequence{item, {GrammarSymbol::rule, optional}}, Sequence{}});
      sequence->push_back({GrammarSymbol::rule, optional});
    }
  }

  int64_t parse_count() {
    const size_t start = pos_;
    int64_t value = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      value = value * 10 + (peek() - '0');
      if (value > kMaxRepeat) error("repetition counts above " + std::to_string(kMaxRepeat) + " are not supported");
      ++pos_;
    }
    if (pos_ == start) error("expected a number");
    return value;
  }

  uint32_t parse_hex(int n_digits) {
    uint32_t value = 0;
    for (int i = 0; i < n_digits; ++i) {
      const char c = peek();
      int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                              : -1;
      if (digit < 0) error("expected a hex digit");
      value = value * 16 + uint32_t(digit);
      ++pos_;
    }
    return value;
  }

  // One character of a literal or class: an escape or a UTF-8 code point.
  uint32_t parse_char() {
    if (peek() == '\\') {
      ++pos_;
      const char c = peek();
      ++pos_;
      switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': return uint32_t(c);
        case 'x': return parse_hex(2);
        case 'u': return check_code_point(parse_hex(4));
        case 'U': return check_code_point(parse_hex(8));
        default: --pos_; error(std::string("unknown escape '\\") + c + "'");
      }
    }
    const unsigned char lead = static_cast<unsigned char>(peek());
    const int n = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (n == 0 || pos_ + size_t(n) > text_.size()) error("invalid UTF-8 in the grammar");
    uint32_t cp = n == 1 ? lead : n == 2 ? (lead & 0x1F) : n == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_ + size_t(i)]) & 0x3F);
    pos_ += size_t(n);
    return cp;
  }

  uint32_t check_code_point(uint32_t cp) {
    if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) error("escape is not a Unicode scalar value");
    return cp;
  }

  GrammarSymbol parse_class(const std::string& rule) {
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    while (peek() != ']') {
      if (at_end()) error("unterminated character class");
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) error("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return class_symbol(rule, ranges, negated);
  }

  // A set of code points as one byte set (ASCII only) or a generated rule of UTF-8 sequences.
  GrammarSymbol class_symbol(const std::string& rule, std::vector<CodeRange> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<CodeRange> merged;
    for (const CodeRange& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1)
        merged.back().second = std::max(merged.back().second, r.second);
      else
        merged.push_back(r);
    }
    if (negated) {
      std::vector<CodeRange> complement;
      uint32_t next = 0;
      for (const CodeRange& r : merged) {
        if (r.first > next) complement.push_back({next, r.first - 1});
        next = r.second + 1;
      }
      if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
      merged = complement;
    }
    // Surrogates are not characters; each range is cut where the UTF-8 length changes.
    std::vector<std::pair<std::string, std::string>> pieces;
    for (const CodeRange& r : merged) {
      for (const CodeRange& part : {CodeRange{r.first, std::min(r.second, 0xD7FFu)},
                                    CodeRange{std::max(r.first, 0xE000u), r.second}}) {
        if (part.first > part.second) continue;
        for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu, kMaxCodePoint}) {
          const uint32_t lo = std::max(part.first, bound == 0x7F ? 0u : bound == 0x7FF ? 0x80u : bound == 0xFFFF ? 0x800u : 0x10000u);
          const uint32_t hi = std::min(part.second, bound);
          if (lo <= hi) split_utf8(lo, hi, &pieces);
        }
      }
    }
    if (pieces.empty()) error("character class matches nothing");
    std::vector<Sequence> alternatives;
    std::array<uint64_t, 4> ascii{};
    bool has_ascii = false;
    for (const auto& [first, last] : pieces) {
      if (first.size() == 1) {
        for (unsigned b = uint8_t(first[0]); b <= uint8_t(last[0]); ++b) ascii[b >> 6] |= uint64_t(1) << (b & 63);
        has_ascii = true;
        continue;
      }
      Sequence sequence;
      for (size_t i = 0; i < first.size(); ++i)
        sequence.push_back({GrammarSymbol::bytes, byte_set(uint8_t(first[i]), uint8_t(last[i]))});
      alternatives.push_back(sequence);
    }
    if (has_ascii) {
      uint32_t set;
      auto it = std::find(byte_sets_.begin(), byte_sets_.end(), ascii);
      if (it != byte_sets_.end()) {
        set = uint32_t(it - byte_sets_.begin());
      } else {
        byte_sets_.push_back(ascii);
        set = uint32_t(byte_sets_.size() - 1);
      }
      if (alternatives.empty()) return {GrammarSymbol::bytes, set};
      alternatives.insert(alternatives.begin(), Sequence{{GrammarSymbol::bytes, set}});
    }
    return {GrammarSymbol::rule, new_rule(rule, std::move(alternatives))};
  }

  // A rule that can reach itself before consuming a byte would expand forever.
  void check_left_recursion(const Grammar& grammar) const {
    const size_t n_rules = grammar.alternatives.size();
    std::vector<uint8_t> nullable(n_rules, 0);
    auto sequence_nullable_until = [&](uint32_t offset, const std::function<bool(uint32_t)>& visit) {
      for (uint32_t p = offset; grammar.code[p].kind != GrammarSymbol::end; ++p) {
        const GrammarSymbol& s = grammar.code[p];
        if (s.kind == GrammarSymbol::bytes) return false;
        if (visit && visit(s.index)) return false;
        if (!nullable[s.index]) return false;
      }
      return true;
    };
    // A rule is nullable once one alternative without bytes has all its rules nullable: count each
    // alternative's rules still unknown and let each rule found nullable count its uses down (a
    // sweep until nothing changes takes a pass per link of a chain of rules: quadratic).
    std::vector<uint32_t> unknown_rules;           // [alternative]
    std::vector<uint32_t> alternative_rule;        // [alternative] the rule it belongs to
    std::vector<std::vector<uint32_t>> uses(n_rules);  // [rule] alternatives naming it, once per use
    std::vector<uint32_t> found;                   // nullable rules whose uses are not counted yet
    for (uint32_t r = 0; r < n_rules; ++r)
      for (uint32_t offset : grammar.alternatives[r]) {
        const uint32_t alternative = uint32_t(unknown_rules.size());
        uint32_t n_rules_in = 0;
        bool has_bytes = false;
        for (uint32_t p = offset; grammar.code[p].kind != GrammarSymbol::end; ++p) {
          if (grammar.code[p].kind == GrammarSymbol::bytes) has_bytes = true;
          else ++n_rules_in;
        }
        unknown_rules.push_back(has_bytes ? UINT32_MAX : n_rules_in);
        alternative_rule.push_back(r);
        if (has_bytes) continue;
        for (uint32_t p = offset; grammar.code[p].kind != GrammarSymbol::end; ++p)
          uses[grammar.code[p].index].push_back(alternative);
        if (n_rules_in == 0 && !nullable[r]) {
          nullable[r] = 1;
          found.push_back(r);
        }
      }
    while (!found.empty()) {
      const uint32_t rule = found.back();
      found.pop_back();
      for (uint32_t alternative : uses[rule]) {
        const uint32_t owner = alternative_rule[alternative];
        if (--unknown_rules[alternative] == 0 && !nullable[owner]) {
          nullable[owner] = 1;
          found.push_back(owner);
        }
      }
    }
    // left[r]: rules r may expand to first; a cycle is left recursion.
    std::vector<std::vector<uint32_t>> left(n_rules);
    for (size_t r = 0; r < n_rules; ++r)
      for (uint32_t offset : grammar.alternatives[r])
        sequence_nullable_until(offset, [&](uint32_t rule) {
          left[r].push_back(rule);
          return false;
        });
    // Depth-first with an explicit path (a chain of many rules must not exhaust the stack).
    std::vector<uint8_t> color(n_rules, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;  // (rule, its next edge)
    for (uint32_t start = 0; start < n_rules; ++start) {
      if (color[start] != 0) continue;
      color[start] = 1;
      path.push_back({start, 0});
      while (!path.empty()) {
        auto& [r, edge] = path.back();
        if (edge == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t next = left[r][edge++];
        if (color[next] == 1)
          throw Error("grammar: the rule '" + grammar.rule_names[next] +
                      "' is left-recursive (it can reach itself before matching a character, e.g. a "
                      "repetition of something that can be empty)");
        if (color[next] == 0) {
          color[next] = 1;
          path.push_back({next, 0});
        }
      }
    }
  }

  std::string_view text_;
  std::string_view start_;
  size_t pos_ = 0;
  std::map<std::string, uint32_t> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<std::string> rule_names_;
  std::vector<bool> defined_;
  std::vector<std::array<uint64_t, 4>> byte_sets_;
};

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text, std::string_view start) {
  return Parser(text, start).run();
}

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

}  // namespace tf
