// What structured output costs per token on the host: the grammar's mask for every token of a
// JSON reply (the trie walk, cold, and from the per-state cache) and the state's step along the
// token, for a JSON-schema grammar and json_object, on a real tokenizer. Prints medians and ranges.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/lane_constraint.h"
#include "grammar/grammar_matcher.h"
#include "server/json_schema_grammar.h"
#include "tokenizer/tokenizer.h"

using namespace tf;
using Clock = std::chrono::steady_clock;

namespace {

struct Spread {
  double median, low, high;
};

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// Microseconds per token over one walk of `reply`: a mask at every token, then the step.
double walk_us_per_token(GrammarMatcher& matcher, const std::vector<int32_t>& tokens) {
  const auto start = Clock::now();
  GrammarState state = matcher.start();
  uint64_t checksum = 0;
  for (int32_t token : tokens) {
    const std::vector<uint32_t>& mask = matcher.allowed_tokens(state);
    if (!((mask[size_t(token) >> 5] >> (token & 31)) & 1)) std::fprintf(stderr, "token %d refused\n", token);
    checksum += mask[0];
    state = matcher.advance_token(state, token);
  }
  if (!state.is_complete) std::fprintf(stderr, "the reply did not complete its grammar\n");
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (checksum == 1) std::fprintf(stderr, " ");  // keeps the masks read
  return us / double(tokens.size());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model_dir = argc > 1 ? argv[1] : "models/tensorfold-code-target";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
  auto tokenizer = Tokenizer::from_file(model_dir + "/tokenizer.json");
  auto vocabulary = grammar_vocabulary(*tokenizer, tokenizer->n_tokens());
  const nlohmann::json schema = {
      {"type", "object"},
      {"properties",
       {{"name", {{"type", "string"}}},
        {"kind", {{"enum", {"function", "class", "module"}}}},
        {"lines", {{"type", "integer"}}},
        {"args", {{"type", "array"}, {"items", {{"type", "string"}, {"pattern", "^[a-z_]{1,16}$"}}}}},
        {"doc", {{"type", "string"}}},
        {"pure", {{"type", "boolean"}}}}},
      {"required", {"args", "doc", "kind", "lines", "name"}}};
  const std::string reply =
      R"({"args": ["items", "target", "low", "high"], "doc": "Return the index of target in the sorted list items, )"
      R"(or -1 when it is absent; the search halves the range each step.", "kind": "function", "lines": 14, )"
      R"("name": "binary_search", "pure": true})";
  const std::vector<int32_t> tokens = tokenizer->encode(reply);
  std::printf("tokenizer: %s (%lld tokens), reply: %zu tokens, %zu bytes, repeats: %d\n", model_dir.c_str(),
              (long long)tokenizer->n_tokens(), tokens.size(), reply.size(), repeats);
  std::printf("| grammar | masks | us per token (median) | range | masks computed per walk |\n|---|---|---:|---|---:|\n");
  for (const auto& [name, gbnf] : {std::pair<std::string, std::string>{"json_schema", server::json_schema_gbnf(schema, "schema")},
                                   {"json_object", server::json_object_gbnf()}}) {
    auto grammar = Grammar::parse(gbnf);
    std::vector<double> cold, warm;
    int64_t computed = 0;
    for (int r = 0; r < repeats; ++r) {
      GrammarMatcher matcher(grammar, vocabulary);  // a fresh reply: no mask cached
      cold.push_back(walk_us_per_token(matcher, tokens));
      computed = matcher.n_mask_computations();
      warm.push_back(walk_us_per_token(matcher, tokens));  // the same states again: cached masks
    }
    const Spread c = spread(cold), w = spread(warm);
    std::printf("| %s | cold | %.1f | %.1f-%.1f | %lld |\n", name.c_str(), c.median, c.low, c.high, (long long)computed);
    std::printf("| %s | cached | %.1f | %.1f-%.1f | 0 |\n", name.c_str(), w.median, w.low, w.high);
  }
  return 0;
}
