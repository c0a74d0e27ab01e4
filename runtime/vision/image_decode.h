// Image decoding for vision models: PNG, JPEG and WebP bytes -> RGB8 pixels, exactly as
// Pillow opens the file and Hugging Face's `convert_to_rgb` (transformers
// image_transforms.py) turns it into RGB:
//   - an image with an alpha band or a tRNS transparency entry is converted to RGBA and
//     alpha-composited onto opaque white (Pillow's integer ImagingAlphaComposite);
//   - grayscale (1/2/4/8-bit) and palette images are expanded; 16-bit RGB(A) and gray+alpha
//     keep the high byte of each sample (Pillow's "RGB;16B" unpackers); 16-bit gray is
//     Pillow's mode "I;16", whose RGB conversion clips values above 255 to 255;
//   - JPEG: libjpeg's default decoding (ISLOW IDCT, fancy upsampling), as Pillow runs it;
//     a 4-component (CMYK / YCCK) JPEG is read with Adobe's inverted polarity ("CMYK;I")
//     and converted with Pillow's cmyk2rgb;
//   - WebP: lossy, lossless, with or without alpha (first frame of a still image;
//     animated WebP is an error).
// EXIF orientation is not applied (Pillow's Image.open does not; HF's load_image does for
// URLs and paths, but serving passes decoded images).
//
// Thread-safety: DecodeImage is reentrant; it keeps no state between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {

enum class ImageFormat { kPng, kJpeg, kWebp };
const char* ImageFormatName(ImageFormat format);

struct DecodeLimits {
  // Images with more pixels (width * height) than this are rejected before any pixel
  // buffer is allocated (kResourceExhausted). The default admits 8192 x 8192.
  uint64_t max_pixels = 64ull << 20;
};

// An image in RGB8 after HF's convert_to_rgb. Owns its pixels.
struct DecodedImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height rows of width RGB triples, row-major, no padding
  ImageFormat format = ImageFormat::kPng;
  // The mode Pillow gives the file when it opens it ("RGB", "RGBA", "L", "LA", "P", "1",
  // "I;16", "CMYK"), and whether convert_to_rgb composited it onto white (an alpha band
  // or a transparency entry). Only a plain "RGB" image without compositing is processed
  // the same with do_convert_rgb false (ImagePreprocessParams).
  std::string source_mode;
  bool composited = false;
};

// Decodes PNG, JPEG or WebP bytes (the format is sniffed from the magic bytes). Errors:
// kInvalidArgument (empty, or not one of the three formats), kDataLoss (truncated or
// corrupt; the message names the format and what the library reported),
// kUnimplemented (valid but unsupported: animated WebP, 12-bit JPEG, 2-component JPEG),
// kResourceExhausted (more pixels than `limits.max_pixels`).
Expected<DecodedImage> DecodeImage(const uint8_t* data, size_t size,
                                   const DecodeLimits& limits = DecodeLimits());

}  // namespace xrt
