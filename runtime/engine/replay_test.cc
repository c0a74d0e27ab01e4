// ReadTrace: images in a trace line become placeholder runs at their offsets,
// with one content hash per content id; bad image fields name the line.
#include "runtime/engine/replay.h"

#include <unistd.h>
#include <cstdio>

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace xrt {
namespace {

constexpr int32_t kImage = 99;
const TraceImageParams kVision{kImage, 3};

class ReadTraceTest : public ::testing::Test {
 protected:
  // One file per test and process: ctest runs the tests of this binary in parallel.
  std::string path_ = ::testing::TempDir() + "read_trace_test_" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                      std::to_string(::getpid()) + ".jsonl";
  void TearDown() override { std::remove(path_.c_str()); }
  Expected<std::vector<TraceRequest>> Read(const std::string& text,
                                           const TraceImageParams& images = kVision,
                                           const TraceLoraParams& lora = {}) {
    std::ofstream(path_) << text;
    // "abcd" -> 1 2 3 4 (text ids never equal the image token here).
    auto encode = [](const std::string& s) {
      std::vector<int32_t> ids;
      for (char c : s) ids.push_back(c - 'a' + 1);
      return ids;
    };
    return ReadTrace(path_, encode, 100, images, lora);
  }
};

TEST_F(ReadTraceTest, ImagesAreInsertedAtTheirOffsetsWithOneHashPerId) {
  auto t = Read(
      R"({"prompt": "abcd", "max_tokens": 1, "images": [{"id": "x", "tokens": 3}, {"offset": 2}, {"id": "y", "offset": 2}]})"
      "\n"
      R"({"prompt": "ab", "max_tokens": 1, "images": [{"id": "y", "offset": 2}]})"
      "\n"
      R"({"prompt": "a", "max_tokens": 1, "num_images": 2, "image_tokens": 3})"
      "\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<int32_t> first = {kImage, kImage, kImage, 1,      2, kImage, kImage,
                                      kImage, kImage, kImage, kImage, 3, 4};
  EXPECT_EQ((*t)[0].prompt, first);
  ASSERT_EQ((*t)[0].images.size(), 3u);
  EXPECT_EQ((*t)[0].images[0].offset, 0);
  EXPECT_EQ((*t)[0].images[1].offset, 5);
  EXPECT_EQ((*t)[0].images[2].offset, 8);
  for (const auto& span : (*t)[0].images) EXPECT_EQ(span.length, 3);
  EXPECT_EQ((*t)[1].prompt, (std::vector<int32_t>{1, 2, kImage, kImage, kImage}));
  // x, the anonymous image, y; y again; two anonymous images: 5 contents.
  EXPECT_EQ((*t)[1].images[0].content_hash, (*t)[0].images[2].content_hash);
  EXPECT_NE((*t)[0].images[0].content_hash, (*t)[0].images[1].content_hash);
  ASSERT_EQ((*t)[2].images.size(), 2u);
  EXPECT_EQ((*t)[2].prompt,
            (std::vector<int32_t>{kImage, kImage, kImage, kImage, kImage, kImage, 1}));
  EXPECT_EQ((*t)[2].images[1].offset, 3);
  EXPECT_NE((*t)[2].images[0].content_hash, (*t)[2].images[1].content_hash);
  EXPECT_EQ((*t)[2].images[1].content_hash, (BlockHash{5, kTraceImageHashTag}));
}

TEST_F(ReadTraceTest, BadImagesNameTheLineAndField) {
  const std::string ok = R"({"prompt": "ab", "max_tokens": 1})"
                         "\n";
  auto error = [&](const std::string& line, const TraceImageParams& images = kVision) {
    auto t = Read(ok + line + "\n", images);
    return t.ok() ? std::string("ok") : t.status().message();
  };
  EXPECT_EQ(error(R"({"prompt": "ab", "max_tokens": 1, "num_images": 1, "image_tokens": 576})"),
            path_ +
                ":2: 'image_tokens' is 576, but the artifact's images have 3 tokens "
                "(tokens_per_image)");
  EXPECT_EQ(error(R"({"prompt": "ab", "max_tokens": 1, "images": [{"offset": 3}]})"),
            path_ + ":2: image offset 3 is past the 2 text tokens");
  EXPECT_EQ(error(R"({"prompt": "ab", "max_tokens": 1, "images": [{"offset": 2}, {"offset": 1}]})"),
            path_ +
                ":2: images[1]: 'offset' 1 is before the previous image's 2 (list images "
                "in prompt order)");
  EXPECT_EQ(error(R"({"prompt": "ab", "max_tokens": 1, "images": [{"ofset": 1}]})"),
            path_ + ":2: images[0]: unknown key 'ofset' (known: id, tokens, offset)");
  EXPECT_EQ(error(R"({"prompt": "ab", "max_tokens": 1, "images": [], "num_images": 1})"),
            path_ + ":2: give either 'images' or 'num_images', not both");
  EXPECT_EQ(error(R"({"prompt": "ab", "max_tokens": 1, "num_images": 1})", TraceImageParams{}),
            path_ + ":2: 'num_images': the artifact has no vision encoder");
  EXPECT_EQ(error(R"({"prompt": "ab", "max_tokens": 1, "images": [{"id": 7}]})"),
            path_ + ":2: images[0]: 'id' must be a string");
}

TEST_F(ReadTraceTest, LoraNamesTheAdapterOfALine) {
  TraceLoraParams lora;
  lora.enabled = true;
  const std::string trace = R"({"prompt": "ab", "max_tokens": 1, "lora": "x"})"
                            "\n"
                            R"({"prompt": "ab", "max_tokens": 1})"
                            "\n";
  auto t = Read(trace, kVision, lora);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[0].lora, "x");
  EXPECT_EQ((*t)[1].lora, "");
  // Without LoRA the line naming an adapter is an error that says why.
  lora.enabled = false;
  lora.why_not = "no LoRA here";
  t = Read(trace, kVision, lora);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), path_ + ":1: 'lora' names adapter 'x', but no LoRA here");
  lora.enabled = true;
  for (const char* bad : {R"({"prompt": "ab", "max_tokens": 1, "lora": ""})",
                          R"({"prompt": "ab", "max_tokens": 1, "lora": 3})"}) {
    t = Read(std::string("\n") + bad + "\n", kVision, lora);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().message(),
              path_ + ":2: 'lora' must be a non-empty string (an adapter name)");
  }
}

// Replay of adapters on an engine without LoRA is an error naming the request.
TEST(Replay, AdaptersNeedLora) {
  TraceRequest r;
  r.prompt = {1, 2};
  r.lora = "x";
  ReplayParams p;
  auto rep = Replay(p, {r});
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().message(),
            "trace request 1: names LoRA adapter 'x', but LoRA is not served");
}

}  // namespace
}  // namespace xrt
