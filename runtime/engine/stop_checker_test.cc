// Every stop rule of StopChecker, on the llama3 fixture tokenizer.
#include "runtime/engine/stop_checker.h"

#include <gtest/gtest.h>

#include "runtime/engine/engine_test_util.h"

namespace xrt {
namespace {

class StopCheckerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::FixtureTokenizer("llama3");
    ASSERT_NE(tokenizer_, nullptr);
  }

  std::vector<int32_t> Ids(const std::string& text) { return tokenizer_->Encode(text, false); }

  // Feeds `tokens` until the checker finishes; returns the text sent and the
  // finish reason ("" if it never finished), and how many tokens it took.
  struct Run {
    std::string text;
    std::string reason;
    size_t consumed = 0;
    std::vector<std::string> pieces;  // text per token
  };
  Run Feed(StopChecker& c, const std::vector<int32_t>& tokens) {
    Run r;
    for (size_t i = 0; i < tokens.size(); ++i) {
      StopResult s = c.Append(tokens[i], static_cast<int64_t>(i + 1));
      r.text += s.text;
      r.pieces.push_back(s.text);
      r.consumed = i + 1;
      if (s.finished()) {
        r.reason = s.finish_reason;
        break;
      }
    }
    return r;
  }
  StopConditions Conditions() {
    StopConditions c;
    c.max_tokens = 100;
    c.eos_token_ids = {tokenizer_->eos_id()};
    return c;
  }
  // A checker with stop strings `stop`, otherwise as Conditions().
  StopChecker WithStop(std::vector<std::string> stop, int64_t max_tokens = 100) {
    StopConditions c = Conditions();
    c.stop = std::move(stop);
    c.max_tokens = max_tokens;
    return StopChecker(std::move(c), tokenizer_, true);
  }

  const Tokenizer* tokenizer_ = nullptr;
};

TEST_F(StopCheckerTest, EosStopsAndAddsNoText) {
  ASSERT_GE(tokenizer_->eos_id(), 0);
  std::vector<int32_t> tokens = Ids("Hello world");
  const size_t n = tokens.size();
  tokens.push_back(tokenizer_->eos_id());
  tokens.push_back(Ids(" more")[0]);
  StopChecker c(Conditions(), tokenizer_, true);
  Run r = Feed(c, tokens);
  EXPECT_EQ(r.reason, "stop");
  EXPECT_EQ(r.consumed, n + 1);
  EXPECT_EQ(r.text, "Hello world");
}

TEST_F(StopCheckerTest, EveryModelEosIdStops) {
  StopConditions cond = Conditions();
  const int32_t other = Ids(" banana")[0];
  cond.eos_token_ids = {tokenizer_->eos_id(), other};
  StopChecker c(cond, tokenizer_, true);
  Run r = Feed(c, Ids("Hello banana split"));
  EXPECT_EQ(r.reason, "stop");
  EXPECT_EQ(r.text, "Hello");
}

TEST_F(StopCheckerTest, IgnoreEosKeepsGoingButStopTokenIdsStillStop) {
  StopConditions cond = Conditions();
  cond.ignore_eos = true;
  const int32_t stop = Ids(" there")[0];
  cond.stop_token_ids = {stop};
  StopChecker c(cond, tokenizer_, true);
  std::vector<int32_t> tokens = Ids("Hello");
  tokens.push_back(tokenizer_->eos_id());  // ignored (and, special, adds no text)
  for (int32_t t : Ids(" world there again")) tokens.push_back(t);
  Run r = Feed(c, tokens);
  EXPECT_EQ(r.reason, "stop");
  EXPECT_EQ(r.text, "Hello world");
}

TEST_F(StopCheckerTest, StopStringCutsTheTextAndHoldsBackAPossibleStart) {
  StopChecker c = WithStop({"STOP"});
  // "S" and "ST" may start "STOP": they are held back, then released when
  // they turn out not to be one.
  Run r = Feed(c, Ids("a S b ST c STOP d"));
  EXPECT_EQ(r.reason, "stop");
  EXPECT_EQ(r.text, "a S b ST c ");
  for (const std::string& piece : r.pieces) EXPECT_EQ(piece.find("STOP"), std::string::npos);
  // The hold-back: no piece ends with a proper prefix of "STOP"; the held
  // "S" and "ST" go out at the start of a later piece.
  bool released = false;
  for (size_t i = 0; i < r.pieces.size(); ++i) {
    const std::string& p = r.pieces[i];
    for (const char* prefix : {"S", "ST", "STO"}) {
      const std::string s(prefix);
      EXPECT_FALSE(p.size() >= s.size() && p.compare(p.size() - s.size(), s.size(), s) == 0)
          << "piece " << i << ": '" << p << "'";
    }
    if (!p.empty() && p[0] == 'S') released = true;
  }
  EXPECT_TRUE(released);
}

TEST_F(StopCheckerTest, StopStringSpanningTokens) {
  StopChecker c = WithStop({"lo wor"});
  Run r = Feed(c, Ids("Hello world"));
  EXPECT_EQ(r.reason, "stop");
  EXPECT_EQ(r.text, "Hel");
}

TEST_F(StopCheckerTest, MaxTokensFinishesLengthAndFlushesTheHeldText) {
  std::vector<int32_t> tokens = Ids("Hello world");
  StopChecker c = WithStop({"worldwide"}, static_cast<int64_t>(tokens.size()));
  Run r = Feed(c, tokens);
  EXPECT_EQ(r.reason, "length");
  EXPECT_EQ(r.consumed, tokens.size());
  EXPECT_EQ(r.text, "Hello world");  // " world" was held back (may start "worldwide")
  EXPECT_EQ(r.pieces.back(), " world");
}

TEST_F(StopCheckerTest, MaxModelLenFinishesLength) {
  StopConditions cond = Conditions();
  cond.prompt_tokens = 10;
  cond.max_model_len = 13;
  StopChecker c(cond, tokenizer_, true);
  Run r = Feed(c, Ids("one two three four five"));
  EXPECT_EQ(r.reason, "length");
  EXPECT_EQ(r.consumed, 3u);
}

TEST_F(StopCheckerTest, EosOnTheLastAllowedTokenIsStop) {
  StopConditions cond = Conditions();
  cond.max_tokens = 1;
  StopChecker c(cond, tokenizer_, true);
  EXPECT_EQ(c.Append(tokenizer_->eos_id(), 1).finish_reason, "stop");
}

TEST_F(StopCheckerTest, FlushReturnsTheHeldText) {
  StopChecker c = WithStop({"world peace"});
  Run r = Feed(c, Ids("Hello world"));
  EXPECT_EQ(r.reason, "");
  EXPECT_EQ(r.text, "Hello ");  // "world" may start "world peace"
  EXPECT_EQ(c.Flush(), "world");
}

TEST_F(StopCheckerTest, WithoutATokenizerOnlyTokenRulesApply) {
  StopConditions cond;
  cond.max_tokens = 3;
  cond.stop = {"x"};
  cond.eos_token_ids = {7};
  StopChecker c(cond, nullptr, true);
  StopResult a = c.Append(1, 1);
  EXPECT_FALSE(a.finished());
  EXPECT_EQ(a.text, "");
  EXPECT_FALSE(c.Append(1, 2).finished());
  EXPECT_EQ(c.Append(1, 3).finish_reason, "length");
  StopChecker d(cond, nullptr, true);
  EXPECT_EQ(d.Append(7, 1).finish_reason, "stop");
}

TEST(ModelEosTokenIds, GenerationConfigAndTokenizerEosWithoutRepeats) {
  EXPECT_EQ(ModelEosTokenIds({511, 509}, 2), (std::vector<int32_t>{511, 509, 2}));
  EXPECT_EQ(ModelEosTokenIds({511, 509}, 509), (std::vector<int32_t>{511, 509}));
  EXPECT_EQ(ModelEosTokenIds({}, 4), (std::vector<int32_t>{4}));
  EXPECT_EQ(ModelEosTokenIds({3}, -1), (std::vector<int32_t>{3}));
}

}  // namespace
}  // namespace xrt
