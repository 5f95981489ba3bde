// LogprobRelease: a reply's logprobs list exactly the tokens whose text begins in the reply's text,
// with text offsets that count the text as the client reads it (invalid bytes as U+FFFD).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "engine/stop_matcher.h"
#include "server/logprob_release.h"
#include "tokenizer/tokenizer.h"

namespace tf::server {
namespace {

// Token i is the i-th string of the table, so tests write replies as the pieces they are cut into.
class TableTokenizer : public Tokenizer {
 public:
  explicit TableTokenizer(std::vector<std::string> pieces, std::set<int32_t> special_ids = {})
      : pieces_(std::move(pieces)), special_ids_(std::move(special_ids)) {}
  std::vector<int32_t> encode(std::string_view, const std::vector<TextSpan>&) const override { return {}; }
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) text += token_bytes(id);
    return text;
  }
  std::string token_bytes(int32_t id) const override { return pieces_[size_t(id)]; }
  int32_t token_id(std::string_view) const override { return -1; }
  bool is_special(int32_t id) const override { return special_ids_.count(id) > 0; }
  int64_t n_tokens() const override { return int64_t(pieces_.size()); }

 private:
  std::vector<std::string> pieces_;
  std::set<int32_t> special_ids_;
};

// The updates the engine sends for a reply of every table token in order (output.cpp): each token
// with its logprob and the text the stream decoder and the stop matcher release; the reply ends
// where a stop string completes, else after the last token.
std::vector<GenerationUpdate> engine_updates(const Tokenizer& tokenizer, std::vector<std::string> stop,
                                             bool skips_special_tokens = false) {
  StreamDecoder decoder(tokenizer, skips_special_tokens);
  StopMatcher matcher(std::move(stop));
  std::vector<GenerationUpdate> updates;
  for (int32_t token = 0; token < tokenizer.n_tokens() && !matcher.is_stopped(); ++token) {
    GenerationUpdate update;
    update.tokens = {token};
    update.logprobs = {{token, -0.5f * float(token), {}}};
    update.text = matcher.push(decoder.push(token));
    updates.push_back(update);
  }
  GenerationUpdate final_update;
  final_update.is_final = true;
  if (!matcher.is_stopped()) final_update.text = matcher.push(decoder.flush()) + matcher.flush();
  updates.push_back(final_update);
  return updates;
}

// One update carrying all of them, as a round's tokens might arrive together.
GenerationUpdate merged(const std::vector<GenerationUpdate>& updates) {
  GenerationUpdate all;
  for (const GenerationUpdate& update : updates) {
    all.tokens.insert(all.tokens.end(), update.tokens.begin(), update.tokens.end());
    all.logprobs.insert(all.logprobs.end(), update.logprobs.begin(), update.logprobs.end());
    all.text += update.text;
  }
  all.is_final = true;
  return all;
}

struct Listing {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<int64_t> text_offsets;
};

Listing list(const Tokenizer& tokenizer, const std::vector<GenerationUpdate>& updates,
             bool skips_special_tokens = false) {
  LogprobRelease release(tokenizer, skips_special_tokens);
  Listing listing;
  for (const GenerationUpdate& update : updates) {
    listing.text += update.text;
    const ListedLogprobs listed = release.add(update);
    EXPECT_EQ(listed.logprobs.size(), listed.text_offsets.size());
    for (const TokenLogprobs& entry : listed.logprobs) listing.tokens.push_back(entry.token);
    listing.text_offsets.insert(listing.text_offsets.end(), listed.text_offsets.begin(), listed.text_offsets.end());
  }
  return listing;
}

// Lists the reply token by token, and again as one update; both must list the same.
Listing list_both_ways(const Tokenizer& tokenizer, const std::vector<std::string>& stop,
                       bool skips_special_tokens = false) {
  const std::vector<GenerationUpdate> updates = engine_updates(tokenizer, stop, skips_special_tokens);
  const Listing by_token = list(tokenizer, updates, skips_special_tokens);
  const Listing at_once = list(tokenizer, {merged(updates)}, skips_special_tokens);
  EXPECT_EQ(by_token.text, at_once.text);
  EXPECT_EQ(by_token.tokens, at_once.tokens);
  EXPECT_EQ(by_token.text_offsets, at_once.text_offsets);
  return by_token;
}

// For valid UTF-8: the listed tokens' bytes start with the text, and all but the last lie inside it.
void expect_tokens_cover_the_text_exactly(const Tokenizer& tokenizer, const Listing& listing) {
  std::string bytes;
  for (int32_t token : listing.tokens) bytes += tokenizer.token_bytes(token);
  EXPECT_EQ(bytes.compare(0, listing.text.size(), listing.text), 0) << bytes << " vs " << listing.text;
  if (listing.tokens.empty()) return;
  EXPECT_LT(bytes.size() - tokenizer.token_bytes(listing.tokens.back()).size(), listing.text.size());
}

TEST(LogprobRelease, AReplyWithoutAStopListsEveryToken) {
  const TableTokenizer tokenizer({"Hel", "lo", ", ", "", "world"});
  const Listing listing = list_both_ways(tokenizer, {"STOP"});
  EXPECT_EQ(listing.text, "Hello, world");
  EXPECT_EQ(listing.tokens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(listing.text_offsets, (std::vector<int64_t>{0, 3, 5, 7, 7}));
}

// "o w" starts inside "lo " and ends inside "wor": the first is listed, the second is not.
TEST(LogprobRelease, ATokenStraddlingTheCutIsListed) {
  const TableTokenizer tokenizer({"Hel", "lo ", "wor", "ld"});
  const Listing listing = list_both_ways(tokenizer, {"o w"});
  EXPECT_EQ(listing.text, "Hell");
  EXPECT_EQ(listing.tokens, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(listing.text_offsets, (std::vector<int64_t>{0, 3}));
  expect_tokens_cover_the_text_exactly(tokenizer, listing);
}

TEST(LogprobRelease, TokensWhollyInsideTheStopStringAreNotListed) {
  const TableTokenizer tokenizer({"ab", "X", "Y", "Z", "after"});
  const Listing at_boundary = list_both_ways(tokenizer, {"XYZ"});
  EXPECT_EQ(at_boundary.text, "ab");
  EXPECT_EQ(at_boundary.tokens, (std::vector<int32_t>{0}));
  expect_tokens_cover_the_text_exactly(tokenizer, at_boundary);
  // A stop that ends the reply's text at once lists nothing.
  const Listing from_the_start = list_both_ways(tokenizer, {"abX"});
  EXPECT_EQ(from_the_start.text, "");
  EXPECT_TRUE(from_the_start.tokens.empty());
}

// A round's drafted tokens after the stop string (one update with all of them) are not listed.
TEST(LogprobRelease, TokensAfterTheStopStringAreNotListed) {
  const TableTokenizer tokenizer({"one", " two", " thr", "ee", " four", " five"});
  std::vector<GenerationUpdate> updates = engine_updates(tokenizer, {"two t"});
  ASSERT_EQ(updates.size(), 4u);  // the stop completes with " thr"
  EXPECT_EQ(updates[0].text + updates[1].text + updates[2].text, "one ");
  // The round also verified "ee" and " four": a server that heard them must not list them.
  GenerationUpdate round = merged(updates);
  round.tokens.insert(round.tokens.end(), {3, 4});
  round.logprobs.push_back({3, -1.5f, {}});
  round.logprobs.push_back({4, -2.0f, {}});
  const Listing listing = list(tokenizer, {round});
  EXPECT_EQ(listing.text, "one ");
  EXPECT_EQ(listing.tokens, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(listing.text_offsets, (std::vector<int64_t>{0, 3}));
}

// A character split over tokens: each piece after the first starts inside it, so its offset
// counts that character; the pieces are listed once the character is released.
TEST(LogprobRelease, OffsetsCountCharactersOfSplitTokens) {
  const TableTokenizer tokenizer({"\xc3\xa9", "\xe4", "\xb8", "\xad", "x", "\xe4\xb8"});
  const Listing whole = list_both_ways(tokenizer, {"STOP"});
  EXPECT_EQ(whole.text, "\xc3\xa9\xe4\xb8\xadx\xef\xbf\xbd");  // the cut tail is one U+FFFD
  EXPECT_EQ(whole.tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(whole.text_offsets, (std::vector<int64_t>{0, 1, 2, 2, 2, 3}));
  const Listing stopped = list_both_ways(tokenizer, {"x"});
  EXPECT_EQ(stopped.text, "\xc3\xa9\xe4\xb8\xad");
  EXPECT_EQ(stopped.tokens, (std::vector<int32_t>{0, 1, 2, 3}));
}

// Invalid bytes reach the text as U+FFFD (three bytes for one): positions are the text's, so the
// tokens inside the stop string stay unlisted and offsets count the replacement characters.
TEST(LogprobRelease, InvalidBytesCountAsTheReplacementCharacter) {
  const TableTokenizer tokenizer({"\xff", "ab", "STOP", "zz"});
  const Listing listing = list_both_ways(tokenizer, {"STOP"});
  EXPECT_EQ(listing.text, "\xef\xbf\xbd" "ab");
  EXPECT_EQ(listing.tokens, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(listing.text_offsets, (std::vector<int64_t>{0, 1}));
}

// A stray continuation byte and a surrogate's three bytes are one and three characters of text.
TEST(LogprobRelease, OffsetsCountEveryReplacementCharacter) {
  const TableTokenizer tokenizer({"\x80", "a", "\xed\xa0\x80", "b", "\xe4\xb8", "c"});
  const Listing listing = list_both_ways(tokenizer, {"STOP"});
  EXPECT_EQ(listing.text, "\xef\xbf\xbd" "a" "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "b" "\xef\xbf\xbd" "c");
  EXPECT_EQ(listing.tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(listing.text_offsets, (std::vector<int64_t>{0, 1, 2, 5, 6, 7}));
  // Cut right after the surrogate: "b" and what follows are not listed.
  const Listing stopped = list_both_ways(tokenizer, {"b"});
  EXPECT_EQ(stopped.tokens, (std::vector<int32_t>{0, 1, 2}));
}

// A skipped special token has no text: it is listed where the text after it begins (at the end of
// an uncut reply), shown it is text like any other.
TEST(LogprobRelease, ASkippedSpecialTokenIsListedWhereTheTextAfterItBegins) {
  const TableTokenizer tokenizer({"<|s|>", "Hi", "<|s|>", " there", "<|s|>"}, {0, 2, 4});
  const Listing skipped = list_both_ways(tokenizer, {"STOP"}, true);
  EXPECT_EQ(skipped.text, "Hi there");
  EXPECT_EQ(skipped.tokens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(skipped.text_offsets, (std::vector<int64_t>{0, 0, 2, 2, 8}));
  const Listing shown = list_both_ways(tokenizer, {"STOP"}, false);
  EXPECT_EQ(shown.text, "<|s|>Hi<|s|> there<|s|>");
  EXPECT_EQ(shown.tokens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(shown.text_offsets, (std::vector<int64_t>{0, 5, 7, 12, 18}));
}

// Stop strings see the text as returned: a skipped token's text cannot complete one, and a skipped
// token just before the cut is not listed, as no text of the reply follows it.
TEST(LogprobRelease, StopStringsSeeTheTextWithoutSkippedTokens) {
  const TableTokenizer tokenizer({"Hi", "<|s|>", " the", "re"}, {1});
  const Listing not_a_stop = list_both_ways(tokenizer, {"<|s|>"}, true);
  EXPECT_EQ(not_a_stop.text, "Hi there");
  EXPECT_EQ(not_a_stop.tokens, (std::vector<int32_t>{0, 1, 2, 3}));
  const Listing across_the_skipped = list_both_ways(tokenizer, {"i the"}, true);
  EXPECT_EQ(across_the_skipped.text, "H");
  EXPECT_EQ(across_the_skipped.tokens, (std::vector<int32_t>{0}));
  const Listing right_after = list_both_ways(tokenizer, {" the"}, true);
  EXPECT_EQ(right_after.text, "Hi");
  EXPECT_EQ(right_after.tokens, (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace tf::server
