// PreprocessImage against HF's slow CLIP / SigLIP processors (tests/gen_image_fixtures.py):
// pixel_values within 1e-6 (and bit for bit), for every fixture image and config; the
// config parser on both file layouts; the output-size rules; the content hash.
#include "runtime/vision/image_preprocess.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/vision/vision_test_util.h"

namespace xrt {
namespace {

using vision_test::Expected;
using vision_test::FixturePath;
using vision_test::ReadBytes;
using vision_test::ReadJson;

const char* const kConfigs[] = {"clip_336", "clip_small", "clip_pad", "siglip_224", "siglip_small"};

nlohmann::json ConfigJson(const std::string& config) {
  for (const char* file : {"preprocessor_config.json", "processor_config.json"}) {
    nlohmann::json j = ReadJson(FixturePath("configs/" + config + "/" + file));
    if (!j.is_discarded()) return j;
  }
  return nlohmann::json();
}

ImagePreprocessParams LoadParams(const std::string& config) {
  auto p = ParseImageProcessorConfig(ConfigJson(config), config);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : ImagePreprocessParams();
}

DecodedImage Decode(const std::string& name) {
  std::vector<uint8_t> bytes = ReadBytes(FixturePath(name));
  auto img = DecodeImage(bytes.data(), bytes.size());
  EXPECT_TRUE(img.ok()) << name << ": " << img.status().ToString();
  return img.ok() ? *img : DecodedImage();
}

std::string Sha256Hex(const void* data, size_t n) {
  uint8_t d[SHA256_DIGEST_LENGTH];
  SHA256(static_cast<const uint8_t*>(data), n, d);
  ImageHash h;
  std::memcpy(h.bytes.data(), d, 32);
  return h.Hex();
}

TEST(ImagePreprocessTest, MatchesHfPixelValues) {
  int compared = 0;
  for (const char* config : kConfigs) {
    ImagePreprocessParams p = LoadParams(config);
    for (const auto& [name, e] : Expected()["images"].items()) {
      SCOPED_TRACE(std::string(config) + " " + name);
      DecodedImage img = Decode(name);
      const nlohmann::json& want = e["outputs"][config];
      auto size = PreprocessOutputSize(p, ImageSize{img.height, img.width});
      ASSERT_TRUE(size.ok()) << size.status().ToString();
      ASSERT_EQ(want["shape"], nlohmann::json::array({3, size->height, size->width}));
      std::vector<float> out(3 * static_cast<size_t>(size->height) * size->width, NAN);
      Status s = PreprocessImage(img, p, out.data());
      ASSERT_TRUE(s.ok()) << s.ToString();
      // Bit for bit: Pillow's resize is reproduced exactly and the float steps round as numpy.
      EXPECT_EQ(Sha256Hex(out.data(), out.size() * sizeof(float)), want["sha256"]);
      double max_diff = 0;
      size_t worst = 0;
      if (want.contains("samples")) {
        for (const auto& sample : want["samples"]) {
          size_t i = sample[0].get<size_t>();
          double d = std::fabs(out[i] - sample[1].get<double>());
          if (d > max_diff) max_diff = d, worst = i;
        }
      } else {
        std::vector<uint8_t> raw = ReadBytes(FixturePath(name + "." + config + ".f32"));
        ASSERT_EQ(raw.size(), out.size() * sizeof(float));
        std::vector<float> ref(out.size());
        std::memcpy(ref.data(), raw.data(), raw.size());
        for (size_t i = 0; i < out.size(); ++i) {
          double d = std::fabs(double(out[i]) - ref[i]);
          if (!(d <= max_diff)) max_diff = d, worst = i;
        }
      }
      EXPECT_LE(max_diff, 1e-6) << "worst at flat index " << worst;
      ++compared;
    }
  }
  EXPECT_GE(compared, 100);
}

TEST(ImagePreprocessTest, ParsesLlavaHfPreprocessorConfig) {
  ImagePreprocessParams p = LoadParams("clip_336");
  EXPECT_EQ(p.processor, ImageProcessorKind::kClip);
  EXPECT_TRUE(p.do_convert_rgb && p.do_resize && p.do_center_crop && p.do_rescale &&
              p.do_normalize);
  EXPECT_EQ(p.resize_rule, ResizeRule::kShortestEdge);
  EXPECT_EQ(p.shortest_edge, 336);
  EXPECT_EQ(p.crop_height, 336);
  EXPECT_EQ(p.crop_width, 336);
  EXPECT_EQ(p.resample, kResampleBicubic);
  EXPECT_EQ(p.rescale_factor, 0.00392156862745098);
  EXPECT_EQ(p.image_mean[0], 0.48145466f);
  EXPECT_EQ(p.image_std[2], 0.27577711f);
  auto fixed = FixedOutputSize(p);
  ASSERT_TRUE(fixed.has_value());
  EXPECT_EQ(fixed->height, 336);
  EXPECT_EQ(fixed->width, 336);
}

TEST(ImagePreprocessTest, ParsesProcessorConfigLayout) {
  nlohmann::json j = ConfigJson("clip_small");
  ASSERT_TRUE(j.contains("image_processor"));
  ImagePreprocessParams p = LoadParams("clip_small");
  EXPECT_EQ(p.shortest_edge, 32);
  EXPECT_EQ(p.crop_height, 32);
  // The same fields at the top level give the same parameters.
  auto flat = ParseImageProcessorConfig(j["image_processor"], "flat");
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(HashImage(DecodedImage(), *flat), HashImage(DecodedImage(), p));
}

TEST(ImagePreprocessTest, SiglipClassDefaults) {
  ImagePreprocessParams p = LoadParams("siglip_small");
  EXPECT_EQ(p.processor, ImageProcessorKind::kSiglip);
  EXPECT_EQ(p.resize_rule, ResizeRule::kExact);
  EXPECT_EQ(p.resize_height, 24);
  EXPECT_EQ(p.resize_width, 40);
  EXPECT_FALSE(p.do_center_crop);
  EXPECT_EQ(p.image_mean[1], 0.5f);
  EXPECT_EQ(p.image_std[1], 0.5f);
  EXPECT_EQ(p.rescale_factor, 1.0 / 255.0);
  auto fixed = FixedOutputSize(p);
  ASSERT_TRUE(fixed.has_value());
  EXPECT_EQ(fixed->height, 24);
  EXPECT_EQ(fixed->width, 40);
  // Legacy int sizes: size -> shortest_edge, crop_size -> square.
  auto legacy = ParseImageProcessorConfig(
      {{"feature_extractor_type", "CLIPFeatureExtractor"}, {"size", 224}, {"crop_size", 200}},
      "legacy");
  ASSERT_TRUE(legacy.ok()) << legacy.status().ToString();
  EXPECT_EQ(legacy->shortest_edge, 224);
  EXPECT_EQ(legacy->crop_width, 200);
}

// Each bad config is an error whose message names the file and the field.
TEST(ImagePreprocessTest, ConfigErrorsNameFileAndField) {
  const nlohmann::json base = ConfigJson("clip_336");
  struct Case {
    const char* key;
    nlohmann::json value;
    StatusCode code;
    const char* field;
  };
  const Case cases[] = {
      {"image_processor_type", "LlavaNextImageProcessor", StatusCode::kUnimplemented,
       "'image_processor_type'"},
      {"resample", 2, StatusCode::kUnimplemented, "'resample'"},
      {"size", {{"longest_edge", 512}}, StatusCode::kUnimplemented, "'size'"},
      {"size", {{"shortest_edge", 0}}, StatusCode::kInvalidArgument, "'size.shortest_edge'"},
      {"crop_size", {{"height", 3}}, StatusCode::kUnimplemented, "'crop_size'"},
      {"do_resize", "yes", StatusCode::kInvalidArgument, "'do_resize'"},
      {"do_pad", true, StatusCode::kUnimplemented, "'do_pad'"},
      {"image_std", {0.5, 0.0, 0.5}, StatusCode::kInvalidArgument, "'image_std'"},
      {"image_mean", {0.5, 0.5}, StatusCode::kInvalidArgument, "'image_mean'"},
      {"rescale_factor", "1/255", StatusCode::kInvalidArgument, "'rescale_factor'"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = base;
    j[c.key] = c.value;
    auto p = ParseImageProcessorConfig(j, "dir/preprocessor_config.json");
    ASSERT_FALSE(p.ok()) << c.key;
    EXPECT_EQ(p.status().code(), c.code) << p.status().ToString();
    EXPECT_NE(p.status().message().find("dir/preprocessor_config.json"), std::string::npos);
    EXPECT_NE(p.status().message().find(c.field), std::string::npos) << p.status().message();
    // Nested layout: the field is named with its path.
    auto nested = ParseImageProcessorConfig({{"image_processor", j}}, "processor_config.json");
    ASSERT_FALSE(nested.ok());
    EXPECT_NE(nested.status().message().find(std::string("'image_processor.") + (c.field + 1)),
              std::string::npos)
        << nested.status().message();
  }
  nlohmann::json no_type = base;
  no_type.erase("image_processor_type");
  auto p = ParseImageProcessorConfig(no_type, "x.json");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("image_processor_type"), std::string::npos);
  EXPECT_FALSE(ParseImageProcessorConfig(nlohmann::json::array(), "x.json").ok());
}

TEST(ImagePreprocessTest, ShortestEdgeOutputSize) {
  ImagePreprocessParams p = LoadParams("clip_336");
  p.do_center_crop = false;
  // int(336 * 640 / 427) = 503 (truncated, not rounded: 503.6)
  auto land = ResizeOutputSize(p, ImageSize{427, 640});
  ASSERT_TRUE(land.ok());
  EXPECT_EQ(land->height, 336);
  EXPECT_EQ(land->width, 503);
  auto port = ResizeOutputSize(p, ImageSize{640, 427});
  ASSERT_TRUE(port.ok());
  EXPECT_EQ(port->height, 503);
  EXPECT_EQ(port->width, 336);
  auto square = ResizeOutputSize(p, ImageSize{7, 7});
  ASSERT_TRUE(square.ok());
  EXPECT_EQ(square->height, 336);
  EXPECT_EQ(square->width, 336);
  EXPECT_FALSE(FixedOutputSize(p).has_value());
  // A 1 x 10^6 strip would resize to 336 x 3.36e8: refused, not allocated.
  EXPECT_FALSE(ResizeOutputSize(p, ImageSize{1000000, 1}).ok());
  p.do_resize = false;
  auto same = PreprocessOutputSize(p, ImageSize{5, 9});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->height, 5);
  EXPECT_EQ(same->width, 9);
}

// With do_convert_rgb false HF keeps the file's channels: the same result for plain RGB,
// an error for an image DecodeImage had to convert.
TEST(ImagePreprocessTest, DoConvertRgbFalse) {
  ImagePreprocessParams p = LoadParams("clip_small");
  ImagePreprocessParams q = p;
  q.do_convert_rgb = false;
  DecodedImage rgb = Decode("astronaut_landscape.png");
  std::vector<float> a(3 * 32 * 32), b(3 * 32 * 32);
  ASSERT_TRUE(PreprocessImage(rgb, p, a.data()).ok());
  ASSERT_TRUE(PreprocessImage(rgb, q, b.data()).ok());
  EXPECT_EQ(a, b);
  for (const char* name : {"coffee_rgba.png", "camera_gray.png", "rocket_rgb_trns.png"}) {
    Status s = PreprocessImage(Decode(name), q, b.data());
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << name << ": " << s.ToString();
  }
}

TEST(ImagePreprocessTest, RejectsInconsistentImage) {
  DecodedImage img;
  img.width = 4;
  img.height = 4;
  img.rgb.resize(10);
  std::vector<float> out(3 * 32 * 32);
  EXPECT_EQ(PreprocessImage(img, LoadParams("clip_small"), out.data()).code(),
            StatusCode::kInvalidArgument);
}

TEST(ImagePreprocessTest, HashChangesWithPixelsAndParametersOnly) {
  DecodedImage img = Decode("rocket_tiny.png");
  ImagePreprocessParams p = LoadParams("clip_336");
  const ImageHash h = HashImage(img, p);
  EXPECT_EQ(h.Hex().size(), 64u);
  EXPECT_EQ(h.Hex().find_first_not_of("0123456789abcdef"), std::string::npos);
  // Same pixels decoded again, same parameters parsed again: same hash.
  EXPECT_EQ(HashImage(Decode("rocket_tiny.png"), LoadParams("clip_336")), h);
  // The source format does not matter, only the pixels: a copy with another format tag.
  DecodedImage copy = img;
  copy.format = ImageFormat::kWebp;
  EXPECT_EQ(HashImage(copy, p), h);

  DecodedImage pixel = img;
  pixel.rgb[pixel.rgb.size() / 2] ^= 1;
  EXPECT_NE(HashImage(pixel, p), h);
  DecodedImage transposed = img;  // same bytes, other shape
  std::swap(transposed.width, transposed.height);
  EXPECT_NE(HashImage(transposed, p), h);

  std::vector<ImagePreprocessParams> changed(8, p);
  changed[0].shortest_edge = 335;
  changed[1].crop_width = 335;
  changed[2].do_center_crop = false;
  changed[3].rescale_factor = 1.0 / 256;
  changed[4].image_mean[2] = 0.5f;
  changed[5].image_std[0] = 0.5f;
  changed[6].do_normalize = false;
  changed[7].processor = ImageProcessorKind::kSiglip;
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_NE(HashImage(img, changed[i]), h) << "parameter change " << i;
  }
}

}  // namespace
}  // namespace xrt
