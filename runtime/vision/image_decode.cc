// PNG (libpng), JPEG (libjpeg-turbo) and WebP (libwebp) decoding into RGB8, reproducing
// what Pillow opens and what transformers' convert_to_rgb makes of it (image_decode.h).
//
// libpng and libjpeg report errors by longjmp. Every function that calls setjmp keeps only
// trivially destructible locals, and the buffers it fills are owned by its caller, so a
// longjmp never skips a destructor.
#include "runtime/vision/image_decode.h"

#include <png.h>
#include <webp/decode.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

namespace xrt {
namespace {

// ---- RGB conversion as Pillow does it ------------------------------------------------------

// Pillow's ImagingAlphaComposite of (r, g, b, a) over opaque white, then RGBA -> RGB
// (src/libImaging/AlphaComposite.c, 7 extra bits of precision, divisions by 255 rounded).
inline void CompositeOnWhite(uint8_t r, uint8_t g, uint8_t b, uint8_t a, uint8_t* out) {
  if (a == 0) {
    out[0] = out[1] = out[2] = 255;
    return;
  }
  constexpr uint32_t kPrecisionBits = 7;
  const uint32_t dst_a = 255, dst_c = 255;
  uint32_t blend = dst_a * (255 - a);
  uint32_t outa255 = a * 255u + blend;
  uint32_t coef1 = a * 255u * 255u * (1u << kPrecisionBits) / outa255;
  uint32_t coef2 = 255u * (1u << kPrecisionBits) - coef1;
  auto channel = [&](uint32_t src) {
    uint32_t tmp = src * coef1 + dst_c * coef2 + (0x80u << kPrecisionBits);
    return static_cast<uint8_t>((((tmp >> 8) + tmp) >> 8) >> kPrecisionBits);
  };
  out[0] = channel(r);
  out[1] = channel(g);
  out[2] = channel(b);
}

// Pillow's cmyk2rgb (src/libImaging/Convert.c) on CMYK values after the "CMYK;I" unpacker
// inverted them: nk = 255 - k, channel = nk - MULDIV255(c, nk), MULDIV255 rounding.
inline uint8_t CmykChannel(uint8_t c, uint8_t k) {
  int nk = 255 - k;
  int tmp = c * nk + 128;
  int v = nk - (((tmp >> 8) + tmp) >> 8);
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

Status CheckSize(const char* format, uint64_t width, uint64_t height, const DecodeLimits& limits) {
  if (width == 0 || height == 0) {
    return DataLossError("{}: image has zero size ({} x {})", format, width, height);
  }
  if (width > (1u << 30) || height > (1u << 30) || width * height > limits.max_pixels) {
    return ResourceExhaustedError("{}: image of {} x {} = {} pixels exceeds the limit of {} pixels",
                                  format, width, height, width * height, limits.max_pixels);
  }
  return Status::Ok();
}

// ---- PNG -----------------------------------------------------------------------------------

struct PngIo {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char error[256];
};

void PngRead(png_structp png, png_bytep out, size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->size - io->pos) png_error(png, "file is truncated");
  std::memcpy(out, io->data + io->pos, n);
  io->pos += n;
}

void PngError(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->error, sizeof(io->error), "%s", message);
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

// What ReadPng learned from the header; the pixel buffer is the caller's.
struct PngHeader {
  png_uint_32 width, height;
  int bit_depth, color_type;
  size_t rowbytes;
  png_color palette[256];
  int num_palette;
  png_byte trans_alpha[256];
  int num_trans;
  png_color_16 trans_color;
  bool has_trns;
};

// Reads the header into `h` (phase 1, rows == nullptr) or the image into `rows` (phase 2:
// h.height pointers to rows of h.rowbytes bytes, owned by the caller). Returns false with
// io->error set on failure. Only trivially destructible locals: libpng may longjmp here.
bool ReadPng(PngIo* io, PngHeader* h, const DecodeLimits& limits, png_bytep* rows, bool* too_big) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, io, PngError, PngWarning);
  if (!png) {
    std::snprintf(io->error, sizeof(io->error), "cannot create the libpng reader");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    if (!info) std::snprintf(io->error, sizeof(io->error), "cannot create the libpng reader");
    return false;
  }
  io->pos = 0;
  png_set_read_fn(png, io, PngRead);
  // Ancillary chunks (text, ICC profiles) are not used; cap what libpng buffers for them.
  png_set_chunk_malloc_max(png, 8u << 20);
  png_set_user_limits(png, 1u << 30, 1u << 30);
  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &h->width, &h->height, &h->bit_depth, &h->color_type, &interlace, nullptr,
               nullptr);
  *too_big = !CheckSize("PNG", h->width, h->height, limits).ok();
  if (*too_big) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  h->num_palette = 0;
  if (h->color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp palette = nullptr;
    if (png_get_PLTE(png, info, &palette, &h->num_palette) != 0 && h->num_palette > 0) {
      std::memcpy(h->palette, palette, sizeof(png_color) * std::min(h->num_palette, 256));
    }
  }
  h->has_trns = false;
  h->num_trans = 0;
  png_bytep trans_alpha = nullptr;
  png_color_16p trans_color = nullptr;
  if (png_get_tRNS(png, info, &trans_alpha, &h->num_trans, &trans_color) != 0) {
    h->has_trns = true;
    if (trans_alpha && h->num_trans > 0) {
      std::memcpy(h->trans_alpha, trans_alpha, std::min(h->num_trans, 256));
    }
    if (trans_color) h->trans_color = *trans_color;
  }
  if (h->bit_depth < 8) png_set_packing(png);  // one byte per sample, values unscaled
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  h->rowbytes = png_get_rowbytes(png, info);
  if (rows) png_read_image(png, rows);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Expected<DecodedImage> DecodePng(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  PngIo io{data, size, 0, {0}};
  PngHeader h{};
  bool too_big = false;
  if (!ReadPng(&io, &h, limits, nullptr, &too_big)) {
    if (too_big) return CheckSize("PNG", h.width, h.height, limits);
    return DataLossError("PNG: {}", io.error);
  }
  const int samples = h.color_type == PNG_COLOR_TYPE_GRAY         ? 1
                      : h.color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                      : h.color_type == PNG_COLOR_TYPE_RGB        ? 3
                      : h.color_type == PNG_COLOR_TYPE_RGBA       ? 4
                                                                  : 1;  // palette
  const int bytes_per_sample = h.bit_depth == 16 ? 2 : 1;
  if (h.rowbytes != static_cast<size_t>(h.width) * samples * bytes_per_sample) {
    return InternalError("PNG: row of {} bytes for width {} and {} samples of {} bits", h.rowbytes,
                         h.width, samples, h.bit_depth);
  }
  std::vector<uint8_t> raw(h.rowbytes * h.height);
  std::vector<png_bytep> rows(h.height);
  for (png_uint_32 y = 0; y < h.height; ++y) rows[y] = raw.data() + h.rowbytes * y;
  const PngHeader header = h;
  if (!ReadPng(&io, &h, limits, rows.data(), &too_big)) {
    return DataLossError("PNG: {}", io.error);
  }
  if (h.rowbytes != header.rowbytes) return InternalError("PNG: row size changed between reads");

  DecodedImage img;
  img.format = ImageFormat::kPng;
  img.width = static_cast<int>(h.width);
  img.height = static_cast<int>(h.height);
  const size_t n = static_cast<size_t>(h.width) * h.height;
  img.rgb.resize(n * 3);
  uint8_t* out = img.rgb.data();
  const uint8_t* in = raw.data();
  // 16-bit samples are big-endian; Pillow's ";16B" unpackers keep the high byte.
  auto sample8 = [&](size_t i) { return in[i * bytes_per_sample]; };

  switch (h.color_type) {
    case PNG_COLOR_TYPE_GRAY: {
      img.source_mode = h.bit_depth == 1 ? "1" : h.bit_depth == 16 ? "I;16" : "L";
      img.composited = h.has_trns;
      // Pillow's tRNS for gray: mode "1" -> 0 or 255; "L" and "I;16" -> the raw 16-bit
      // value, compared with the unpacked value (so for 2/4-bit images with the
      // scaled-up value, as Pillow does).
      const uint32_t trns =
          h.bit_depth == 1 ? (h.trans_color.gray ? 255u : 0u) : h.trans_color.gray;
      const int scale = h.bit_depth == 1   ? 255
                        : h.bit_depth == 2 ? 0x55
                        : h.bit_depth == 4 ? 0x11
                                           : 1;
      for (size_t i = 0; i < n; ++i) {
        uint32_t v;
        uint8_t v8;
        if (h.bit_depth == 16) {
          v = (static_cast<uint32_t>(in[2 * i]) << 8) | in[2 * i + 1];
          v8 = static_cast<uint8_t>(std::min<uint32_t>(v, 255));  // Pillow's I16_RGB clips
        } else {
          v = static_cast<uint32_t>(in[i]) * scale;
          v8 = static_cast<uint8_t>(v);
        }
        if (h.has_trns && v == trns) {
          out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = 255;
        } else {
          out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = v8;
        }
      }
      break;
    }
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      img.source_mode = h.bit_depth == 16 ? "RGBA" : "LA";
      img.composited = true;
      for (size_t i = 0; i < n; ++i) {
        uint8_t l = sample8(2 * i);
        CompositeOnWhite(l, l, l, sample8(2 * i + 1), out + 3 * i);
      }
      break;
    case PNG_COLOR_TYPE_RGB: {
      img.source_mode = "RGB";
      img.composited = h.has_trns;
      const png_color_16& t = h.trans_color;
      for (size_t i = 0; i < n; ++i) {
        uint8_t r = sample8(3 * i), g = sample8(3 * i + 1), b = sample8(3 * i + 2);
        if (h.has_trns && r == t.red && g == t.green && b == t.blue) {
          out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = 255;
        } else {
          out[3 * i] = r;
          out[3 * i + 1] = g;
          out[3 * i + 2] = b;
        }
      }
      break;
    }
    case PNG_COLOR_TYPE_RGBA:
      img.source_mode = "RGBA";
      img.composited = true;
      for (size_t i = 0; i < n; ++i) {
        CompositeOnWhite(sample8(4 * i), sample8(4 * i + 1), sample8(4 * i + 2), sample8(4 * i + 3),
                         out + 3 * i);
      }
      break;
    case PNG_COLOR_TYPE_PALETTE: {
      img.source_mode = "P";
      img.composited = h.has_trns;
      if (h.num_palette <= 0) return DataLossError("PNG: palette image without a PLTE chunk");
      uint8_t alpha[256];
      for (int i = 0; i < 256; ++i) alpha[i] = i < h.num_trans ? h.trans_alpha[i] : 255;
      for (size_t i = 0; i < n; ++i) {
        int idx = in[i];
        if (idx >= h.num_palette) {
          return DataLossError("PNG: pixel {} has palette index {} but the palette has {} entries",
                               i, idx, h.num_palette);
        }
        const png_color& c = h.palette[idx];
        if (h.has_trns) {
          CompositeOnWhite(c.red, c.green, c.blue, alpha[idx], out + 3 * i);
        } else {
          out[3 * i] = c.red;
          out[3 * i + 1] = c.green;
          out[3 * i + 2] = c.blue;
        }
      }
      break;
    }
    default:
      return DataLossError("PNG: unknown color type {}", h.color_type);
  }
  return img;
}

// ---- JPEG ----------------------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  bool truncated;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings are ignored as Pillow ignores them, except a premature end of the data, which
// Pillow reports as a truncated file.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
}

// Progressive JPEGs can hold arbitrarily many scans, each a pass over the whole image;
// more than this is rejected rather than decoded slowly.
constexpr int kMaxJpegScans = 1000;

void JpegProgress(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number > kMaxJpegScans) {
      auto* err = reinterpret_cast<JpegError*>(cinfo->err);
      std::snprintf(err->message, sizeof(err->message), "more than %d scans", kMaxJpegScans);
      longjmp(err->jump, 1);
    }
  }
}

struct JpegHeader {
  JDIMENSION width, height;
  int components;
};

// Phase 1 (pixels == nullptr): reads the header. Phase 2: decodes into `pixels`
// (width * height * components bytes). Only trivially destructible locals.
bool ReadJpeg(const uint8_t* data, size_t size, JpegHeader* h, uint8_t* pixels, JpegError* err) {
  jpeg_decompress_struct cinfo;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = JpegErrorExit;
  err->mgr.emit_message = JpegEmitMessage;
  err->truncated = false;
  err->message[0] = 0;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = JpegProgress;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  h->width = cinfo.image_width;
  h->height = cinfo.image_height;
  h->components = cinfo.num_components;
  if (!pixels) {
    jpeg_destroy_decompress(&cinfo);
    return true;
  }
  // What Pillow asks for: its mode's color space; libjpeg picks the file's color space
  // (JFIF / Adobe markers) and the default ISLOW IDCT with fancy upsampling.
  cinfo.out_color_space = h->components == 1   ? JCS_GRAYSCALE
                          : h->components == 3 ? JCS_RGB
                                               : JCS_CMYK;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_width != h->width || cinfo.output_height != h->height ||
      cinfo.output_components != h->components) {
    std::snprintf(err->message, sizeof(err->message), "decoder output shape differs from header");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const size_t stride = static_cast<size_t>(h->width) * h->components;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  // Pillow stops reading at the end of the frame; data after it is not looked at.
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

Expected<DecodedImage> DecodeJpeg(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  JpegHeader h{};
  JpegError err{};
  if (!ReadJpeg(data, size, &h, nullptr, &err)) return DataLossError("JPEG: {}", err.message);
  if (h.components != 1 && h.components != 3 && h.components != 4) {
    return UnimplementedError("JPEG: {} color components (only 1, 3 and 4 are supported)",
                              h.components);
  }
  XRT_RETURN_IF_ERROR(CheckSize("JPEG", h.width, h.height, limits));
  const size_t n = static_cast<size_t>(h.width) * h.height;
  std::vector<uint8_t> raw(n * h.components);
  if (!ReadJpeg(data, size, &h, raw.data(), &err)) return DataLossError("JPEG: {}", err.message);
  if (err.truncated) return DataLossError("JPEG: file is truncated (premature end of data)");

  DecodedImage img;
  img.format = ImageFormat::kJpeg;
  img.width = static_cast<int>(h.width);
  img.height = static_cast<int>(h.height);
  img.rgb.resize(n * 3);
  uint8_t* out = img.rgb.data();
  if (h.components == 3) {
    img.source_mode = "RGB";
    img.rgb = std::move(raw);
  } else if (h.components == 1) {
    img.source_mode = "L";
    for (size_t i = 0; i < n; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = raw[i];
  } else {
    img.source_mode = "CMYK";
    for (size_t i = 0; i < n; ++i) {
      // Pillow's "CMYK;I" rawmode: Adobe's inverted polarity is always assumed.
      uint8_t k = 255 - raw[4 * i + 3];
      for (int c = 0; c < 3; ++c) out[3 * i + c] = CmykChannel(255 - raw[4 * i + c], k);
    }
  }
  return img;
}

// ---- WebP ----------------------------------------------------------------------------------

const char* WebpStatusName(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "file is truncated";
    default:
      return "unknown error";
  }
}

Expected<DecodedImage> DecodeWebp(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return InternalError("WebP: library version mismatch");
  VP8StatusCode st = WebPGetFeatures(data, size, &config.input);
  if (st != VP8_STATUS_OK) return DataLossError("WebP: {}", WebpStatusName(st));
  if (config.input.has_animation)
    return UnimplementedError("WebP: animated images are not supported");
  XRT_RETURN_IF_ERROR(CheckSize("WebP", static_cast<uint64_t>(config.input.width),
                                static_cast<uint64_t>(config.input.height), limits));
  DecodedImage img;
  img.format = ImageFormat::kWebp;
  img.width = config.input.width;
  img.height = config.input.height;
  const size_t n = static_cast<size_t>(img.width) * img.height;
  const bool alpha = config.input.has_alpha != 0;
  // Pillow decodes with WebPAnimDecoder in (non-premultiplied) RGBA; RGB holds the same
  // color values, so an image without alpha is decoded straight into RGB.
  std::vector<uint8_t> rgba(alpha ? n * 4 : 0);
  img.rgb.resize(n * 3);
  config.output.colorspace = alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = alpha ? rgba.data() : img.rgb.data();
  config.output.u.RGBA.stride = img.width * (alpha ? 4 : 3);
  config.output.u.RGBA.size = alpha ? rgba.size() : img.rgb.size();
  st = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  if (st != VP8_STATUS_OK) return DataLossError("WebP: {}", WebpStatusName(st));
  img.source_mode = alpha ? "RGBA" : "RGB";
  img.composited = alpha;
  if (alpha) {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &rgba[4 * i];
      CompositeOnWhite(p[0], p[1], p[2], p[3], &img.rgb[3 * i]);
    }
  }
  return img;
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
  }
  return "?";
}

Expected<DecodedImage> DecodeImage(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  if (size == 0 || data == nullptr) return InvalidArgumentError("image: no bytes");
  static const uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(data, kPngMagic, 8) == 0) return DecodePng(data, size, limits);
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
    return DecodeJpeg(data, size, limits);
  }
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) {
    return DecodeWebp(data, size, limits);
  }
  return InvalidArgumentError(
      "image: not a PNG, JPEG or WebP file (first bytes {:02x} {:02x} {:02x} {:02x})", data[0],
      size > 1 ? data[1] : 0, size > 2 ? data[2] : 0, size > 3 ? data[3] : 0);
}

}  // namespace xrt
