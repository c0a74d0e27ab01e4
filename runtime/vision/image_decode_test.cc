// DecodeImage against Pillow + transformers' convert_to_rgb (tests/gen_image_fixtures.py):
// every fixture image decodes to exactly the RGB bytes Pillow produced, and bad input is
// an error, never a crash.
#include "runtime/vision/image_decode.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/vision/vision_test_util.h"

namespace xrt {
namespace {

using vision_test::Expected;
using vision_test::FixturePath;
using vision_test::ReadBytes;

std::vector<std::string> ImageNames() {
  std::vector<std::string> names;
  for (const auto& [name, _] : Expected()["images"].items()) names.push_back(name);
  return names;
}

TEST(ImageDecodeTest, FixturesListed) { EXPECT_GE(ImageNames().size(), 20u); }

TEST(ImageDecodeTest, EqualsPillowConvertToRgb) {
  for (const std::string& name : ImageNames()) {
    SCOPED_TRACE(name);
    const nlohmann::json& e = Expected()["images"][name];
    std::vector<uint8_t> bytes = ReadBytes(FixturePath(name));
    ASSERT_FALSE(bytes.empty());
    auto img = DecodeImage(bytes.data(), bytes.size());
    if (!img.ok()) {
      ADD_FAILURE() << img.status().ToString();
      continue;
    }
    EXPECT_EQ(img->width, e["width"].get<int>());
    EXPECT_EQ(img->height, e["height"].get<int>());
    EXPECT_EQ(img->source_mode, e["mode"].get<std::string>());
    EXPECT_EQ(img->composited, e["composited"].get<bool>());
    std::vector<uint8_t> want = ReadBytes(FixturePath(name + ".rgb"));
    if (img->rgb.size() != want.size()) {
      ADD_FAILURE() << "RGB of " << img->rgb.size() << " bytes, Pillow's " << want.size();
      continue;
    }
    size_t diffs = 0, first = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (img->rgb[i] != want[i] && diffs++ == 0) first = i;
    }
    EXPECT_EQ(diffs, 0u) << "first at byte " << first << ": got " << int(img->rgb[first])
                         << ", Pillow " << int(want[first]);
  }
}

TEST(ImageDecodeTest, FormatSniffedFromMagic) {
  for (const auto& [name, format] :
       {std::pair<std::string, ImageFormat>{"camera_gray.png", ImageFormat::kPng},
        {"camera_gray.jpg", ImageFormat::kJpeg},
        {"camera_lossless.webp", ImageFormat::kWebp}}) {
    std::vector<uint8_t> bytes = ReadBytes(FixturePath(name));
    auto img = DecodeImage(bytes.data(), bytes.size());
    ASSERT_TRUE(img.ok()) << name << ": " << img.status().ToString();
    EXPECT_EQ(img->format, format) << name;
  }
}

TEST(ImageDecodeTest, EmptyAndGarbageAreInvalidArgument) {
  auto empty = DecodeImage(nullptr, 0);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  const uint8_t garbage[] = {'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0, 0, 0, 0};
  auto g = DecodeImage(garbage, sizeof(garbage));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("not a PNG, JPEG or WebP"), std::string::npos)
      << g.status().message();
}

// Cut every format at several points: an error (kDataLoss), not a crash or a silent
// partial image.
TEST(ImageDecodeTest, TruncatedIsDataLoss) {
  for (const std::string& name :
       {"astronaut_landscape.png", "astronaut_rgba16_interlaced.png", "coffee_portrait.jpg",
        "rocket_progressive.jpg", "chelsea_cmyk.jpg", "chelsea_square_lossy.webp",
        "astronaut_lossless_alpha.webp", "coffee_lossy_alpha.webp"}) {
    std::vector<uint8_t> bytes = ReadBytes(FixturePath(name));
    for (double frac : {0.05, 0.3, 0.6, 0.9}) {
      size_t n = static_cast<size_t>(bytes.size() * frac);
      auto img = DecodeImage(bytes.data(), n);
      ASSERT_FALSE(img.ok()) << name << " cut to " << n << " of " << bytes.size();
      EXPECT_EQ(img.status().code(), StatusCode::kDataLoss)
          << name << " cut to " << n << ": " << img.status().ToString();
    }
  }
}

TEST(ImageDecodeTest, CorruptPngDataIsDataLoss) {
  std::vector<uint8_t> bytes = ReadBytes(FixturePath("astronaut_landscape.png"));
  for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16; ++i) bytes[i] ^= 0x5a;
  auto img = DecodeImage(bytes.data(), bytes.size());
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kDataLoss) << img.status().ToString();
  EXPECT_NE(img.status().message().find("PNG"), std::string::npos);
}

TEST(ImageDecodeTest, OverPixelLimitIsResourceExhausted) {
  DecodeLimits limits;
  limits.max_pixels = 1000;
  for (const std::string& name :
       {"astronaut_landscape.png", "coffee_portrait.jpg", "chelsea_square_lossy.webp"}) {
    std::vector<uint8_t> bytes = ReadBytes(FixturePath(name));
    auto img = DecodeImage(bytes.data(), bytes.size(), limits);
    ASSERT_FALSE(img.ok()) << name;
    EXPECT_EQ(img.status().code(), StatusCode::kResourceExhausted) << img.status().ToString();
    EXPECT_NE(img.status().message().find("limit of 1000 pixels"), std::string::npos)
        << img.status().message();
    // At the limit it decodes.
    const nlohmann::json& e = Expected()["images"][name];
    limits.max_pixels = e["width"].get<uint64_t>() * e["height"].get<uint64_t>();
    EXPECT_TRUE(DecodeImage(bytes.data(), bytes.size(), limits).ok()) << name;
    limits.max_pixels = 1000;
  }
}

// A PNG header claiming a zero width is rejected by libpng's IHDR checks.
TEST(ImageDecodeTest, ZeroSizePngIsError) {
  std::vector<uint8_t> bytes = ReadBytes(FixturePath("rocket_tiny.png"));
  ASSERT_GT(bytes.size(), 24u);
  bytes[16] = bytes[17] = bytes[18] = bytes[19] = 0;  // IHDR width
  auto img = DecodeImage(bytes.data(), bytes.size());
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kDataLoss) << img.status().ToString();
}

}  // namespace
}  // namespace xrt
