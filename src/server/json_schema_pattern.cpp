// Regex to GBNF: the pattern is parsed into a tree over sets of code points (literals, classes,
// escapes, '.'), and each set is written as the JSON text of its characters, so a matched TAB is
// "\t", never raw. With length bounds the tree is unrolled into an automaton and counted.
#include "server/json_schema_pattern.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "server/openai_protocol.h"

namespace tf::server {
namespace {

constexpr int64_t kMaxRepeat = 1000;         // the grammar's repetition bound
constexpr int kMaxGroupDepth = 64;           // groups nest at most this deep (the parser recurses)
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Inclusive ranges of code points.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

CodeRanges normalized(CodeRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges out;
  for (const auto& range : ranges) {
    if (!out.empty() && range.first <= out.back().second + 1) out.back().second = std::max(out.back().second, range.second);
    else out.push_back(range);
  }
  return out;
}

CodeRanges complement(const CodeRanges& ranges) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalized(ranges)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

CodeRanges intersection(const CodeRanges& a, const CodeRanges& b) {
  CodeRanges out;
  for (const auto& [a_lo, a_hi] : a)
    for (const auto& [b_lo, b_hi] : b)
      if (std::max(a_lo, b_lo) <= std::min(a_hi, b_hi)) out.push_back({std::max(a_lo, b_lo), std::min(a_hi, b_hi)});
  return normalized(out);
}

const CodeRanges kDigit = {{'0', '9'}};
const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's \s: white space and line terminators.
const CodeRanges kSpace = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// What '.' leaves out.
const CodeRanges kLineTerminator = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};
// What JSON writes raw inside a string: not '"', '\', controls, or surrogates (not characters).
const CodeRanges kRawInJson = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, kMaxCodePoint}};

std::string utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string hex(uint32_t value, int n_digits) {
  std::string out(size_t(n_digits), '0');
  for (int i = n_digits - 1; i >= 0; --i, value >>= 4) out[size_t(i)] = "0123456789ABCDEF"[value & 15];
  return out;
}

// The characters of `set` as JSON writes them inside a string, as one GBNF expression ("" for an
// empty set): a class of those written raw, or '\' and the escape of one JSON must escape (a
// control without a short form as \u00XX, hex in either case).
std::string json_chars_gbnf(const CodeRanges& set) {
  const CodeRanges raw = intersection(set, kRawInJson);
  if (raw.size() == 1 && raw[0].first == raw[0].second && raw == set) return gbnf_literal(utf8(raw[0].first));
  std::vector<std::string> alternatives;
  if (!raw.empty()) {
    std::string text = "[";
    for (const auto& [lo, hi] : raw) text += "\\U" + hex(lo, 8) + (hi > lo ? "-\\U" + hex(hi, 8) : "");
    alternatives.push_back(text + "]");
  }
  std::string short_escapes, u_escapes[2];  // u_escapes[h]: the last hex digits of \u00hX
  for (const auto& [lo, hi] : intersection(set, {{0, '\\'}})) {
    for (uint32_t cp = lo; cp <= hi; ++cp) {
      switch (cp) {
        case '"': short_escapes += "\\\""; break;
        case '\\': short_escapes += "\\\\"; break;
        case '\b': short_escapes += 'b'; break;
        case '\f': short_escapes += 'f'; break;
        case '\n': short_escapes += 'n'; break;
        case '\r': short_escapes += 'r'; break;
        case '\t': short_escapes += 't'; break;
        default:
          if (cp >= 0x20) break;
          const char digit = "0123456789abcdef"[cp & 15];
          u_escapes[cp >> 4] += digit;
          if (digit >= 'a') u_escapes[cp >> 4] += char(digit - 'a' + 'A');
      }
    }
  }
  std::vector<std::string> escapes;
  if (!short_escapes.empty()) escapes.push_back("[" + short_escapes + "]");
  for (int high = 0; high < 2; ++high)
    if (!u_escapes[high].empty()) escapes.push_back("\"u00" + std::to_string(high) + "\" [" + u_escapes[high] + "]");
  if (!escapes.empty()) {
    std::string text = "\"\\\\\" (";
    for (size_t i = 0; i < escapes.size(); ++i) text += (i ? " | " : "") + escapes[i];
    alternatives.push_back(text + ")");
  }
  if (alternatives.size() == 1) return alternatives[0];
  return alternatives.empty() ? "" : "(" + alternatives[0] + " | " + alternatives[1] + ")";
}

// A part of the parsed pattern: a set of characters, a sequence, alternatives, a repetition, or
// the any-text an unanchored end allows.
struct Node {
  enum Kind { set, sequence, alternatives, repetition, any_text };
  Kind kind = set;
  CodeRanges characters = {};       // set
  std::vector<Node> children = {};  // sequence, alternatives: the parts; repetition: the one repeated
  int64_t min = 0, max = -1;        // repetition (max -1: unbounded)
  bool is_nullable = false;         // whether it can match empty text
};

class PatternParser {
 public:
  PatternParser(const std::string& pattern, const std::string& path) : p_(pattern), path_(path) {}

  // Top-level alternatives each carry their own anchors: ^a|b$ is (^a)|(b$).
  Node run() {
    const Node any{.kind = Node::any_text, .is_nullable = true};
    Node out{.kind = Node::alternatives};
    do {
      const bool is_anchored_start = consume('^');
      Node body = sequence(0);
      const bool is_anchored_end = consume('$');
      Node anchored{.kind = Node::sequence};
      if (!is_anchored_start) anchored.children.push_back(any);
      anchored.is_nullable = body.is_nullable;
      anchored.children.push_back(std::move(body));
      if (!is_anchored_end) anchored.children.push_back(any);
      out.is_nullable = out.is_nullable || anchored.is_nullable;
      out.children.push_back(std::move(anchored));
    } while (consume('|'));
    if (i_ < p_.size()) error("a ')' at offset " + std::to_string(i_) + " closes no group");
    return out;
  }

  [[noreturn]] void error(const std::string& what) const {
    throw ApiError(400, "Invalid '" + path_ + "': the pattern " + nlohmann::json(p_).dump() + " " + what + ".",
                   "invalid_request_error", path_);
  }

 private:
  bool consume(char c) {
    if (i_ >= p_.size() || p_[i_] != c) return false;
    ++i_;
    return true;
  }

  std::string quoted(size_t begin, size_t end) const {
    std::string out = "'";
    out += p_.substr(begin, end - begin);
    return out += "'";
  }

  Node alternatives(int depth) {
    Node out{.kind = Node::alternatives};
    do {
      out.children.push_back(sequence(depth));
      out.is_nullable = out.is_nullable || out.children.back().is_nullable;
    } while (consume('|'));
    return out;
  }

  Node sequence(int depth) {
    Node out{.kind = Node::sequence, .is_nullable = true};
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '|' || c == ')') break;
      if (c == '$' && depth == 0 && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) break;
      const size_t begin = i_;
      out.children.push_back(quantified(atom(depth), begin));
      out.is_nullable = out.is_nullable && out.children.back().is_nullable;
    }
    return out;
  }

  Node atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      if (depth >= kMaxGroupDepth) error("nests groups deeper than " + std::to_string(kMaxGroupDepth) + " levels");
      const size_t begin = i_++;
      if (p_.compare(i_, 2, "?:") == 0) i_ += 2;
      else if (i_ < p_.size() && p_[i_] == '?') error("has a lookaround or named group, which is not supported");
      Node inner = alternatives(depth + 1);
      if (!consume(')')) error("opens a group at offset " + std::to_string(begin) + " that it never closes");
      return inner;
    }
    if (c == '^' || c == '$') error("has an anchor '" + std::string(1, c) + "' inside; anchors are supported only at the ends");
    if (c == '*' || c == '+' || c == '?' || c == '{')
      error("has a quantifier '" + std::string(1, c) + "' at offset " + std::to_string(i_) + " with nothing before it to repeat");
    const size_t begin = i_;
    CodeRanges set;
    if (c == '[') set = char_class();
    else if (c == '\\') set = escape(false);
    else if (c == '.') ++i_, set = complement(kLineTerminator);
    else set = {{take_code_point(), 0}}, set[0].second = set[0].first;
    if (json_chars_gbnf(set).empty()) error("has " + quoted(begin, i_) + ", which matches no character");
    return {.kind = Node::set, .characters = std::move(set)};
  }

  // `item` with the quantifier that follows it, if any (`begin`: where the item starts, for errors).
  Node quantified(Node item, size_t begin) {
    if (i_ >= p_.size()) return item;
    int64_t min = 0, max = -1;  // max -1: unbounded
    const char c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    } else if (c == '{') {
      repetition_counts(&min, &max);
    } else {
      return item;
    }
    if (consume('?')) error("has a lazy quantifier " + quoted(begin, i_) + ", which is not supported");
    // A grammar cannot repeat without end what may consume nothing (it would recurse in place).
    if (max < 0 && item.is_nullable)
      error("repeats " + quoted(begin, i_) + " without bound though it can match empty text; make the repeated part "
            "match at least one character");
    const bool is_nullable = item.is_nullable || min == 0;
    return {.kind = Node::repetition, .children = {std::move(item)}, .min = min, .max = max, .is_nullable = is_nullable};
  }

  // {m}, {m,} or {m,n} at i_.
  void repetition_counts(int64_t* min, int64_t* max) {
    const size_t begin = i_;
    const size_t close = p_.find('}', i_);
    const auto number = [&](int64_t* value) {
      if (i_ >= close || !std::isdigit(static_cast<unsigned char>(p_[i_]))) return false;
      for (*value = 0; i_ < close && std::isdigit(static_cast<unsigned char>(p_[i_])); ++i_)
        *value = std::min<int64_t>(*value * 10 + (p_[i_] - '0'), kMaxRepeat + 1);
      return true;
    };
    ++i_;
    bool is_valid = close != std::string::npos && number(min);
    *max = *min;
    if (is_valid && consume(',')) *max = number(max) ? *max : -1;
    is_valid = is_valid && i_ == close;
    if (!is_valid)
      error("has " + quoted(begin, close == std::string::npos ? p_.size() : close + 1) +
            ", which is not a repetition count: expected {m}, {m,} or {m,n} (write \\{ for a literal brace)");
    ++i_;
    if (*min > kMaxRepeat || *max > kMaxRepeat)
      error("repeats " + quoted(begin, i_) + " more than " + std::to_string(kMaxRepeat) + " times, which is not supported");
    if (*max >= 0 && *max < *min) error("has " + quoted(begin, i_) + ", whose maximum is below its minimum");
  }

  // A class [...] or [^...] at i_.
  CodeRanges char_class() {
    const size_t begin = i_++;
    const bool is_negated = consume('^');
    CodeRanges set;
    while (i_ < p_.size() && p_[i_] != ']') {
      const size_t range_begin = i_;
      const CodeRanges lo = class_atom();
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        const CodeRanges hi = class_atom();
        const auto is_one = [](const CodeRanges& r) { return r.size() == 1 && r[0].first == r[0].second; };
        if (!is_one(lo) || !is_one(hi))
          error("has the range " + quoted(range_begin, i_) + ", whose ends must be single characters");
        if (hi[0].first < lo[0].first) error("has the range " + quoted(range_begin, i_) + ", which is out of order");
        set.push_back({lo[0].first, hi[0].first});
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    if (!consume(']')) error("opens a class at offset " + std::to_string(begin) + " that it never closes");
    return is_negated ? complement(set) : normalized(set);
  }

  CodeRanges class_atom() {
    if (p_[i_] == '\\') return escape(true);
    const uint32_t cp = take_code_point();
    return {{cp, cp}};
  }

  // An escape at i_: a class of characters (\d \w \s and their negations) or one character.
  CodeRanges escape(bool is_in_class) {
    const size_t begin = i_++;
    if (i_ >= p_.size()) error("ends with a lone backslash");
    const char c = p_[i_++];
    const auto one = [](uint32_t cp) { return CodeRanges{{cp, cp}}; };
    switch (c) {
      case 'd': return kDigit;
      case 'D': return complement(kDigit);
      case 'w': return kWord;
      case 'W': return complement(kWord);
      case 's': return kSpace;
      case 'S': return complement(kSpace);
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0':
        if (i_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_])))
          error("has " + quoted(begin, i_ + 1) + ": octal escapes are not supported");
        return one(0);
      case 'x': return one(hex_digits(2, begin));
      case 'u': {
        const uint32_t cp = hex_digits(4, begin);
        if (cp >= 0xD800 && cp <= 0xDFFF) error("has " + quoted(begin, i_) + ", a surrogate, which is not a character");
        return one(cp);
      }
      case 'c':
        if (i_ < p_.size() && std::isalpha(static_cast<unsigned char>(p_[i_]))) return one(uint32_t(p_[i_++]) % 32);
        error("has " + quoted(begin, i_) + ", which needs a letter after \\c");
      case 'b':
        if (is_in_class) return one('\b');
        error("has \\b (a word boundary), which is not supported");
      case 'B': error("has \\B (a word boundary), which is not supported");
      case 'k': error("has a named backreference, which is not supported");
      case 'p':
      case 'P': error("has " + quoted(begin, i_) + ", a Unicode property escape, which is not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(c))) error("has a backreference " + quoted(begin, i_) + ", which is not supported");
        if (std::isalpha(static_cast<unsigned char>(c))) error("has the unknown escape " + quoted(begin, i_));
        --i_;  // punctuation (or any other character) escaped stands for itself
        return one(take_code_point());
    }
  }

  uint32_t hex_digits(int n_digits, size_t begin) {
    uint32_t value = 0;
    for (int k = 0; k < n_digits; ++k, ++i_) {
      const char c = i_ < p_.size() ? p_[i_] : ' ';
      if (!std::isxdigit(static_cast<unsigned char>(c)))
        error("has " + quoted(begin, std::min(i_ + 1, p_.size())) + ", which needs " + std::to_string(n_digits) + " hex digits");
      value = value * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return value;
  }

  // The code point of the UTF-8 character at i_ (the body was checked to be valid UTF-8).
  uint32_t take_code_point() {
    const unsigned char lead = static_cast<unsigned char>(p_[i_]);
    const size_t n = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    uint32_t cp = n == 1 ? lead : n == 2 ? (lead & 0x1F) : n == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (size_t k = 1; k < n && i_ + k < p_.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(p_[i_ + k]) & 0x3F);
    i_ = std::min(i_ + n, p_.size());
    return cp;
  }

  const std::string& p_;
  const std::string& path_;
  size_t i_ = 0;
};

// The node as a GBNF expression (its repetitions stay counted, so the text stays small).
std::string node_gbnf(const Node& node) {
  switch (node.kind) {
    case Node::set: return json_chars_gbnf(node.characters);
    case Node::any_text: return "json-char*";
    case Node::alternatives: {
      std::string out;
      for (const Node& child : node.children) out += (out.empty() ? "" : " | ") + node_gbnf(child);
      return out;
    }
    case Node::sequence: {
      std::string out;
      for (const Node& child : node.children) {
        const bool is_compound = child.kind == Node::sequence || child.kind == Node::alternatives;
        out += (out.empty() ? "" : " ") + (is_compound ? "(" + node_gbnf(child) + ")" : node_gbnf(child));
      }
      return out.empty() ? "\"\"" : out;
    }
    case Node::repetition: {
      const int64_t min = node.min, max = node.max;
      const std::string counts = max < 0 ? (min == 0 ? "*" : min == 1 ? "+" : "{" + std::to_string(min) + ",}")
                                 : min == 0 && max == 1 ? "?"
                                 : "{" + std::to_string(min) + (max == min ? "" : "," + std::to_string(max)) + "}";
      return "(" + node_gbnf(node.children[0]) + ")" + counts;
    }
  }
  return "";
}

// Length bounds need the pattern unrolled: an automaton, then its product with a length counter.
// Both are kept below this many states, so a schema cannot make the server build without end.
constexpr size_t kMaxLengthStates = 10000;

// A nondeterministic automaton for the pattern over code-point sets, with empty moves (Thompson's
// construction): counted repetitions are unrolled, one copy per count.
class PatternAutomaton {
 public:
  struct Move {
    int set;  // into sets; -1: an empty move
    int to;
  };
  std::vector<std::vector<Move>> moves;  // [state] its moves
  std::vector<CodeRanges> sets;
  int accept = 0;

  PatternAutomaton(const Node& root, const std::function<void()>& too_large) : too_large_(too_large) {
    accept = build(root, new_state());  // state 0 starts
  }

  // The moves on a character from `state` and the states its empty moves reach, and whether they reach accept.
  std::vector<Move> character_moves(int state, bool* is_accepting) const {
    std::vector<Move> out;
    std::vector<bool> is_seen(moves.size());
    std::vector<int> stack = {state};
    is_seen[size_t(state)] = true;
    *is_accepting = false;
    while (!stack.empty()) {
      const int at = stack.back();
      stack.pop_back();
      *is_accepting = *is_accepting || at == accept;
      for (const Move& move : moves[size_t(at)]) {
        if (move.set >= 0) out.push_back(move);
        else if (!is_seen[size_t(move.to)]) is_seen[size_t(move.to)] = true, stack.push_back(move.to);
      }
    }
    return out;
  }

 private:
  int new_state() {
    if (moves.size() >= kMaxLengthStates) too_large_();
    moves.emplace_back();
    return int(moves.size()) - 1;
  }

  int set_index(const CodeRanges& set) {
    for (size_t i = 0; i < sets.size(); ++i)
      if (sets[i] == set) return int(i);
    sets.push_back(set);
    return int(sets.size()) - 1;
  }

  // Adds the node's states after `from`; returns the state where it ends.
  int build(const Node& node, int from) {
    switch (node.kind) {
      case Node::set: {
        const int to = new_state();
        moves[size_t(from)].push_back({set_index(node.characters), to});
        return to;
      }
      case Node::any_text:  // any characters but surrogates, which JSON text never holds
        moves[size_t(from)].push_back({set_index({{0, 0xD7FF}, {0xE000, kMaxCodePoint}}), from});
        return from;
      case Node::sequence:
        for (const Node& child : node.children) from = build(child, from);
        return from;
      case Node::alternatives: {
        const int end = new_state();
        for (const Node& child : node.children) {
          const int branch = new_state();
          moves[size_t(from)].push_back({-1, branch});
          moves[size_t(build(child, branch))].push_back({-1, end});
        }
        return end;
      }
      case Node::repetition: {
        const Node& item = node.children[0];
        for (int64_t i = 0; i < node.min; ++i) from = build(item, from);
        if (node.max < 0) {  // the item is never empty here (the parser refuses it), so the loop always moves on
          const int loop = new_state();
          moves[size_t(from)].push_back({-1, loop});
          moves[size_t(build(item, loop))].push_back({-1, loop});
          return loop;
        }
        const int end = new_state();
        for (int64_t i = node.min; i < node.max; ++i) {
          moves[size_t(from)].push_back({-1, end});
          from = build(item, from);
        }
        moves[size_t(from)].push_back({-1, end});
        return end;
      }
    }
    return from;
  }

  std::function<void()> too_large_;
};

}  // namespace

std::string pattern_gbnf(const std::string& pattern, const std::string& path) {
  return "(" + node_gbnf(PatternParser(pattern, path).run()) + ")";
}

std::string pattern_with_length_gbnf(const std::string& pattern, int64_t min_length, int64_t max_length,
                                     const std::string& name, const std::string& path) {
  PatternParser parser(pattern, path);
  const Node root = parser.run();
  const auto too_large = [&] {
    parser.error("with minLength/maxLength needs more than " + std::to_string(kMaxLengthStates) +
                 " automaton states, which is not supported; lower maxLength or simplify the pattern");
  };
  const PatternAutomaton automaton(root, too_large);

  // Product states (automaton state, length so far); without a maximum, lengths past the minimum
  // are all alike. Built forward from (start, 0), then kept only where an end is still reachable,
  // so every prefix the grammar allows can be finished.
  std::map<std::pair<int, int64_t>, int> index;
  std::vector<std::pair<int, int64_t>> states;
  std::vector<std::vector<PatternAutomaton::Move>> moves;  // [product state] moves into product states
  std::vector<bool> is_end;
  const auto state_of = [&](int state, int64_t length) {
    auto [it, is_new] = index.insert({{state, length}, int(states.size())});
    if (is_new) {
      if (states.size() >= kMaxLengthStates) too_large();
      states.push_back({state, length});
    }
    return it->second;
  };
  state_of(0, 0);
  std::map<int, std::pair<std::vector<PatternAutomaton::Move>, bool>> closures;  // automaton state -> its moves, is accepting
  for (size_t at = 0; at < states.size(); ++at) {
    const auto [state, length] = states[at];
    auto [closure, is_new] = closures.try_emplace(state);
    if (is_new) closure->second.first = automaton.character_moves(state, &closure->second.second);
    const auto& [character_moves, is_accepting] = closure->second;
    std::vector<PatternAutomaton::Move> next;
    for (const PatternAutomaton::Move& move : character_moves)
      if (max_length < 0) next.push_back({move.set, state_of(move.to, std::min(length + 1, min_length))});
      else if (length < max_length) next.push_back({move.set, state_of(move.to, length + 1)});
    moves.push_back(std::move(next));
    is_end.push_back(is_accepting && length >= min_length);
  }
  std::vector<std::vector<int>> sources(states.size());  // [product state] those with a move into it
  for (size_t at = 0; at < states.size(); ++at)
    for (const auto& move : moves[at]) sources[size_t(move.to)].push_back(int(at));
  std::vector<bool> is_live = is_end;
  std::vector<int> stack;
  for (size_t at = 0; at < states.size(); ++at)
    if (is_end[at]) stack.push_back(int(at));
  while (!stack.empty()) {
    const int at = stack.back();
    stack.pop_back();
    for (int source : sources[size_t(at)])
      if (!is_live[size_t(source)]) is_live[size_t(source)] = true, stack.push_back(source);
  }
  if (!is_live[0]) return "";

  std::string rules;
  std::vector<bool> is_set_used(automaton.sets.size());
  for (size_t at = 0; at < states.size(); ++at) {
    if (!is_live[at]) continue;
    std::string body = is_end[at] ? "\"\"" : "";
    for (const auto& move : moves[at]) {
      if (!is_live[size_t(move.to)]) continue;
      is_set_used[size_t(move.set)] = true;
      body += (body.empty() ? "" : " | ") + name + "-set-" + std::to_string(move.set) + " " + name + "-" + std::to_string(move.to);
    }
    rules += name + "-" + std::to_string(at) + " ::= " + body + "\n";
  }
  for (size_t set = 0; set < automaton.sets.size(); ++set)
    if (is_set_used[set]) rules += name + "-set-" + std::to_string(set) + " ::= " + json_chars_gbnf(automaton.sets[set]) + "\n";
  return rules;
}

}  // namespace tf::server
