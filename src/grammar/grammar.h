// A context-free grammar over bytes, compiled from GBNF text: the constraint a structured-output
// request puts on its reply. Code-point classes become UTF-8 byte sequences here, so a matcher
// walks bytes and a token that ends inside a character is judged by the bytes it has.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

struct GrammarSymbol {
  enum Kind : uint8_t { end, bytes, rule };
  Kind kind = end;
  uint32_t index = 0;  // bytes: into byte_sets; rule: the rule
};

class Grammar {
 public:
  // GBNF: `name ::= alternatives` rules (the reply matches `start`, `root` unless named), "literals", [classes] with ranges and
  // ^, `.`, ( groups ), postfix * + ? {m} {m,} {m,n}, # comments. Throws tf::Error naming the
  // line and column; refuses undefined rules and left recursion (also through empty repetitions).
  static std::shared_ptr<const Grammar> parse(std::string_view text, std::string_view start = "root");

  // Each alternative is a run of symbols in `code` that ends with an `end` symbol.
  std::vector<GrammarSymbol> code;
  std::vector<std::vector<uint32_t>> alternatives;  // [rule] offsets of its alternatives in code
  std::vector<std::array<uint64_t, 4>> byte_sets;   // [set] bit b: byte b matches
  std::vector<std::string> rule_names;              // [rule] (generated rules are named after their parent)
  uint32_t root = 0;

  bool matches(uint32_t byte_set, uint8_t byte) const {
    return (byte_sets[byte_set][byte >> 6] >> (byte & 63)) & 1;
  }
};

// A GBNF string literal ("...") holding exactly `text`, escaped as the parser reads it.
std::string gbnf_literal(std::string_view text);

}  // namespace tf
