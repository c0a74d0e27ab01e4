// Image preprocessing for vision towers, reproducing Hugging Face's slow (PIL-backend)
// CLIPImageProcessor / SiglipImageProcessor (transformers image_processing_backends.py
// PilBackend, image_transforms.py):
//   1. resize on uint8 with Pillow's BICUBIC filter, bit-exact (bicubic_resample.h):
//      CLIP-style `shortest_edge` (short side -> S, long side int(S * long / short)) or an
//      exact height x width (SigLIP);
//   2. center crop to crop height x width, top = floor((H - h) / 2), left likewise; an image
//      smaller than the crop is padded with zeros exactly as HF's center_crop pads;
//   3. rescale: float32(float64(pixel) * rescale_factor);
//   4. normalize in float32: (x - mean[c]) / std[c], mean and std rounded to float32;
//   5. channels first (CHW).
// Each step can be off (do_resize, do_center_crop, do_rescale, do_normalize), as in HF.
//
// Thread-safety: all functions are reentrant; ImagePreprocessParams is a plain value.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"
#include "runtime/vision/image_decode.h"

namespace xrt {

enum class ImageProcessorKind { kClip, kSiglip };
const char* ImageProcessorKindName(ImageProcessorKind kind);  // "CLIPImageProcessor", ...

enum class ResizeRule {
  kShortestEdge,  // size {"shortest_edge": S}
  kExact,         // size {"height": H, "width": W}
};

// Pillow's resampling filter numbers (PIL.Image.Resampling); only BICUBIC is implemented.
constexpr int kResampleBicubic = 3;

// What the slow CLIP / SigLIP image processors do, as parameters. Defaults are those of
// CLIPImageProcessor; ParseImageProcessorConfig fills in each class's own defaults.
struct ImagePreprocessParams {
  ImageProcessorKind processor = ImageProcessorKind::kClip;
  bool do_convert_rgb = true;
  bool do_resize = true;
  ResizeRule resize_rule = ResizeRule::kShortestEdge;
  int shortest_edge = 224;  // kShortestEdge
  int resize_height = 0;    // kExact
  int resize_width = 0;     // kExact
  int resample = kResampleBicubic;
  bool do_center_crop = true;
  int crop_height = 224;
  int crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  // Rounded to float32 as HF does (np.array(mean, dtype=image.dtype)).
  std::array<float, 3> image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> image_std = {0.26862954f, 0.26130258f, 0.27577711f};
};

// Parses preprocessor_config.json (the processor's fields at the top level) or
// processor_config.json (the fields inside its "image_processor" object) into params.
// `source` names the file in messages. The class comes from "image_processor_type" (or
// the older "feature_extractor_type"): CLIPImageProcessor, SiglipImageProcessor, with or
// without the "Fast" / "Pil" suffix — all are reproduced as the slow (PIL) processor,
// i.e. what transformers computes with use_fast=False. Fields absent from the file take
// the class defaults of transformers 5. Errors name the file and the field:
// kUnimplemented for a processor class, resample filter, size layout or do_pad this code
// does not reproduce; kInvalidArgument for a value of the wrong type or out of range.
Expected<ImagePreprocessParams> ParseImageProcessorConfig(const nlohmann::json& j,
                                                          const std::string& source);

struct ImageSize {
  int height = 0;
  int width = 0;
};

// The size after the resize step for an input of `in` (the input itself with do_resize
// false). kInvalidArgument if it exceeds 2^28 pixels or 2^30 on a side.
Expected<ImageSize> ResizeOutputSize(const ImagePreprocessParams& p, ImageSize in);

// The size of PreprocessImage's output (per channel) for an input of `in`.
Expected<ImageSize> PreprocessOutputSize(const ImagePreprocessParams& p, ImageSize in);

// The output size when it does not depend on the input (center crop, or an exact resize);
// nullopt for shortest_edge without crop or no resize and no crop. A compiled vision
// tower needs this to be set.
std::optional<ImageSize> FixedOutputSize(const ImagePreprocessParams& p);

// Writes the preprocessed image, 3 x H x W float32 (H, W = PreprocessOutputSize), to
// `out_chw`, which the caller sizes. The values equal HF's pixel_values bit for bit (the
// tests allow 1e-6). kUnimplemented for a resample filter other than BICUBIC, or for
// do_convert_rgb false on an image that was not plain RGB (HF would then not give three
// channels, or would skip the alpha compositing DecodeImage did).
Status PreprocessImage(const DecodedImage& img, const ImagePreprocessParams& p, float* out_chw);

// Content hash of an image for the encoder-output cache and the KV prefix-cache keys:
// SHA-256 over a version tag, the width, height and RGB pixels, and every field of the
// parameters. Equal images with equal parameters hash equal; any pixel or parameter change
// changes it (collisions would serve another image's outputs, hence a cryptographic hash).
struct ImageHash {
  std::array<uint8_t, 32> bytes{};
  std::string Hex() const;  // 64 lowercase hex digits
  bool operator==(const ImageHash& o) const { return bytes == o.bytes; }
  bool operator!=(const ImageHash& o) const { return bytes != o.bytes; }
};
ImageHash HashImage(const DecodedImage& img, const ImagePreprocessParams& p);

}  // namespace xrt
