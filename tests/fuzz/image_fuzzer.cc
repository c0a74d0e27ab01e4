// libFuzzer target: bytes -> DecodeImage (runtime/vision/image_decode.h) -> PreprocessImage
// with a CLIP config (shortest edge + center crop) and a SigLIP config (exact size). Must
// never crash. A decoded image has width * height * 3 RGB bytes within the pixel limit,
// preprocessing it succeeds, and every output value is one the normalization can produce
// (finite, within the range of (0 - mean) / std .. (1 - mean) / std).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/vision/image_decode.h"
#include "runtime/vision/image_preprocess.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

xrt::ImagePreprocessParams Params(const char* type, nlohmann::json size, int crop) {
  nlohmann::json j = {{"image_processor_type", type}, {"size", size}};
  if (crop) j["crop_size"] = {{"height", crop}, {"width", crop + 3}};
  auto p = xrt::ParseImageProcessorConfig(j, "fuzz");
  XCC_FUZZ_CHECK(p.ok(), p.status().ToString());
  return *p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xrt::DecodeLimits limits;
  limits.max_pixels = 1 << 20;  // keeps each run fast; the limit itself is checked below
  auto img = xrt::DecodeImage(data, size, limits);
  xrt::fuzz::CheckNotInternal(img.status());
  if (!img.ok()) return 0;
  XCC_FUZZ_CHECK(img->width > 0 && img->height > 0, "empty image decoded");
  XCC_FUZZ_CHECK(uint64_t(img->width) * img->height <= limits.max_pixels, "over the limit");
  XCC_FUZZ_CHECK(img->rgb.size() == size_t(img->width) * img->height * 3, "RGB size");
  static const xrt::ImagePreprocessParams kConfigs[] = {
      Params("CLIPImageProcessor", {{"shortest_edge", 12}}, 10),
      Params("SiglipImageProcessor", {{"height", 9}, {"width", 14}}, 0)};
  for (const xrt::ImagePreprocessParams& p : kConfigs) {
    auto out_size = xrt::PreprocessOutputSize(p, xrt::ImageSize{img->height, img->width});
    if (!out_size.ok()) continue;  // an extreme aspect ratio resized beyond the limit
    std::vector<float> out(3 * size_t(out_size->height) * out_size->width);
    xrt::Status s = xrt::PreprocessImage(*img, p, out.data());
    XCC_FUZZ_CHECK(s.ok(), s.ToString());
    const size_t plane = out.size() / 3;
    for (size_t i = 0; i < out.size(); ++i) {
      const int c = static_cast<int>(i / plane);
      const float lo = (0.0f - p.image_mean[c]) / p.image_std[c];
      const float hi = (1.0f - p.image_mean[c]) / p.image_std[c];
      XCC_FUZZ_CHECK(std::isfinite(out[i]) && out[i] >= lo - 1e-5f && out[i] <= hi + 1e-5f,
                     "value out of the normalized range");
    }
  }
  (void)xrt::HashImage(*img, kConfigs[0]);
  return 0;
}
