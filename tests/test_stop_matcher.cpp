// StopMatcher: stops across chunks, several and overlapping stop strings, UTF-8 boundaries.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/stop_matcher.h"

namespace tf {
namespace {

// Feeds the chunks in order and returns everything released, flush included.
std::string run_all(StopMatcher& matcher, const std::vector<std::string>& chunks) {
  std::string released;
  for (const std::string& chunk : chunks) released += matcher.push(chunk);
  return released + matcher.flush();
}

std::vector<std::string> bytes_of(const std::string& text) {
  std::vector<std::string> chunks;
  for (char c : text) chunks.emplace_back(1, c);
  return chunks;
}

TEST(StopMatcher, NoStopReleasesEverything) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(run_all(matcher, {"Hello, ", "wor", "ld. S", "TO", "p"}), "Hello, world. STOp");
  EXPECT_FALSE(matcher.is_stopped());

  StopMatcher no_stops({});
  EXPECT_EQ(no_stops.push("abc"), "abc");
  EXPECT_EQ(no_stops.flush(), "");
}

TEST(StopMatcher, HoldsOnlyPossibleStopPrefix) {
  StopMatcher matcher({"</end>"});
  EXPECT_EQ(matcher.push("abc</"), "abc");
  EXPECT_EQ(matcher.push("x"), "</x");
  EXPECT_EQ(matcher.push("</en"), "");
  EXPECT_EQ(matcher.flush(), "</en");
}

TEST(StopMatcher, StopSpanningChunks) {
  StopMatcher matcher({"</end>"});
  EXPECT_EQ(matcher.push("Hello <"), "Hello ");
  EXPECT_EQ(matcher.push("/e"), "");
  EXPECT_EQ(matcher.push("nd> more"), "");
  EXPECT_TRUE(matcher.is_stopped());
  EXPECT_EQ(matcher.push("even more"), "");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, StopFedByteByByte) {
  StopMatcher matcher({"<|im_end|>"});
  EXPECT_EQ(run_all(matcher, bytes_of("xx<|im_<|im_end|>yy")), "xx<|im_");
  EXPECT_TRUE(matcher.is_stopped());
}

TEST(StopMatcher, TextAfterStopNeverReleased) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("abSTOPcd"), "ab");
  EXPECT_TRUE(matcher.is_stopped());
  EXPECT_EQ(matcher.push("more"), "");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, EarliestOfSeveralStops) {
  StopMatcher matcher({"world", "lo w"});
  EXPECT_EQ(matcher.push("hello world"), "hel");
  EXPECT_TRUE(matcher.is_stopped());

  StopMatcher split({"world", "lo w"});
  EXPECT_EQ(run_all(split, {"hel", "lo", " wor", "ld"}), "hel");
}

TEST(StopMatcher, OverlappingPrefixes) {
  // "ab" completes before "abc" could: the shorter stop wins at the same position.
  StopMatcher shorter({"abc", "ab"});
  EXPECT_EQ(shorter.push("xa"), "x");
  EXPECT_EQ(shorter.push("b"), "");
  EXPECT_TRUE(shorter.is_stopped());

  // A stop prefix that fails ("ab" then "d") is released; the real stop starts later.
  StopMatcher chained({"abc", "bcd"});
  EXPECT_EQ(chained.push("zab"), "z");
  EXPECT_EQ(chained.push("cd"), "");
  EXPECT_TRUE(chained.is_stopped());

  StopMatcher self_overlap({"aab"});
  EXPECT_EQ(self_overlap.push("aaa"), "a");
  EXPECT_EQ(self_overlap.push("b"), "");
  EXPECT_TRUE(self_overlap.is_stopped());

  StopMatcher restart({"abcd"});
  EXPECT_EQ(restart.push("abcab"), "abc");
  EXPECT_EQ(restart.push("cd!"), "");
  EXPECT_TRUE(restart.is_stopped());

  // Longest held suffix across stops: "ab" could start "abx", "b" alone could start "by".
  StopMatcher longest({"by", "abx"});
  EXPECT_EQ(longest.push("cab"), "c");
  EXPECT_EQ(longest.push("q"), "abq");
}

TEST(StopMatcher, EmptyStopStringsIgnored) {
  StopMatcher matcher({"", "END"});
  EXPECT_EQ(matcher.push("abc"), "abc");
  EXPECT_EQ(matcher.push("xEND"), "x");
  EXPECT_TRUE(matcher.is_stopped());
}

TEST(StopMatcher, MultibyteStopString) {
  StopMatcher matcher({"。"});
  EXPECT_EQ(matcher.push("你好。再见"), "你好");
  EXPECT_TRUE(matcher.is_stopped());

  // The stop's lead byte arrives alone; only it is held.
  StopMatcher split({"。"});
  const std::string full = "你好。再见";
  EXPECT_EQ(run_all(split, bytes_of(full)), "你好");
}

TEST(StopMatcher, NeverSplitsACharacter) {
  // A character still arriving byte by byte is held until complete.
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("na\xC3"), "na");
  EXPECT_EQ(matcher.push("\xAFve "), "\xC3\xAFve ");
  EXPECT_EQ(matcher.push("\xF0\x9F"), "");
  EXPECT_EQ(matcher.push("\x98"), "");
  EXPECT_EQ(matcher.push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(matcher.flush(), "");

  // A stop that begins mid-character (a continuation byte) holds back the whole character.
  StopMatcher odd({"\xA9z"});
  EXPECT_EQ(odd.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(odd.push("!"), "\xC3\xA9!");
}

TEST(StopMatcher, ChunkingDoesNotChangeOutput) {
  const std::string text = "The answer is 42.\n\nUser: ignore\nUser: more";
  const std::vector<std::string> stops = {"\nUser:", "\n\nUser:", "answer is 43"};
  StopMatcher whole(stops);
  const std::string expected = run_all(whole, {text});
  EXPECT_EQ(expected, "The answer is 42.");
  for (size_t chunk = 1; chunk <= 7; ++chunk) {
    std::vector<std::string> chunks;
    for (size_t at = 0; at < text.size(); at += chunk) chunks.push_back(text.substr(at, chunk));
    StopMatcher matcher(stops);
    EXPECT_EQ(run_all(matcher, chunks), expected) << "chunk size " << chunk;
  }
}

// A closing string ends the reply and stays in it, but not where the reasoning quotes it; the
// reply may start inside the reasoning; a stop string before it still wins; any chunking alike.
TEST(StopMatcher, AClosingStringEndsTheReplyOutsideTheQuietSections) {
  const ClosingString call_close{"</tool_call>", "<think>", "</think>", true};
  const std::string reply = "I may write </tool_call> here.</think>\n\n<tool_call>\n{}\n</tool_call>\n<tool_call>";
  const std::string expected = "I may write </tool_call> here.</think>\n\n<tool_call>\n{}\n</tool_call>";
  for (size_t chunk = 1; chunk <= 9; ++chunk) {
    std::vector<std::string> chunks;
    for (size_t at = 0; at < reply.size(); at += chunk) chunks.push_back(reply.substr(at, chunk));
    StopMatcher matcher({}, call_close);
    EXPECT_EQ(run_all(matcher, chunks), expected) << "chunk size " << chunk;
    EXPECT_TRUE(matcher.is_stopped());
  }
  // Not starting in the reasoning: a <think> the model opens quiets it the same way.
  StopMatcher opened({}, ClosingString{"</tool_call>", "<think>", "</think>", false});
  EXPECT_EQ(run_all(opened, {"<think>a </tool_call></think>b</tool_call>c"}), "<think>a </tool_call></think>b</tool_call>");
  // A <think> later in the reply is text, not reasoning (the reply parser reads it so), and after
  // the reasoning closes it never reopens.
  StopMatcher later({}, ClosingString{"</tool_call>", "<think>", "</think>", false});
  EXPECT_EQ(run_all(later, bytes_of("a <think> b</tool_call>c")), "a <think> b</tool_call>");
  StopMatcher reopened({}, call_close);
  EXPECT_EQ(run_all(reopened, {"r</think>\n<think>x</tool_call>y"}), "r</think>\n<think>x</tool_call>");
  // Outside any reasoning at once.
  StopMatcher plain({}, ClosingString{"</tool_call>", "<think>", "</think>", false});
  EXPECT_EQ(run_all(plain, bytes_of("x</tool_call>y")), "x</tool_call>");
  // A stop string that completes first ends the reply without it.
  StopMatcher stop_first({"STOP"}, ClosingString{"</tool_call>", "", "", false});
  EXPECT_EQ(run_all(stop_first, {"aSTOPb</tool_call>"}), "a");
  StopMatcher stop_held({"</tool_call>x"}, ClosingString{"</tool_call>", "", "", false});
  EXPECT_EQ(run_all(stop_held, {"a</tool_call>x"}), "a</tool_call>");
  // Armed by the opening tag: prose that quotes the closing one goes on; a call then closes it.
  const ClosingString armed{"</tool_call>", "<think>", "</think>", false, "<tool_call>"};
  for (size_t chunk = 1; chunk <= 5; ++chunk) {
    const std::string text = "Close calls with </tool_call> always. <tool_call>{}</tool_call> more";
    std::vector<std::string> chunks;
    for (size_t at = 0; at < text.size(); at += chunk) chunks.push_back(text.substr(at, chunk));
    StopMatcher matcher({}, armed);
    EXPECT_EQ(run_all(matcher, chunks), "Close calls with </tool_call> always. <tool_call>{}</tool_call>");
  }
  StopMatcher prose({}, armed);
  EXPECT_EQ(run_all(prose, {"only </tool_call> quoted"}), "only </tool_call> quoted");
  EXPECT_FALSE(prose.is_stopped());
  // The reasoning never closes: no end.
  StopMatcher unclosed({}, call_close);
  EXPECT_EQ(run_all(unclosed, {"still </tool_call> thinking"}), "still </tool_call> thinking");
  EXPECT_FALSE(unclosed.is_stopped());
}

}  // namespace
}  // namespace tf
