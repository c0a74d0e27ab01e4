// HF slow CLIP / SigLIP image preprocessing (image_preprocess.h). Built with
// -ffp-contract=off: rescale and normalize must round exactly as numpy does.
#include "runtime/vision/image_preprocess.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/vision/bicubic_resample.h"

namespace xrt {
namespace {

constexpr int64_t kMaxSide = 1 << 30;
constexpr int64_t kMaxPixels = 1 << 28;

// Reads a field of `obj` if present; errors name the file and the field.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& obj, const std::string& source, const std::string& prefix)
      : obj_(obj), source_(source), prefix_(prefix) {}

  bool Has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const nlohmann::json& Get(const char* key) const { return obj_.at(key); }

  Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return Status::Ok();
    if (!Get(key).is_boolean()) return Error(key, "a boolean");
    *out = Get(key).get<bool>();
    return Status::Ok();
  }
  Status Number(const char* key, double* out) const {
    if (!Has(key)) return Status::Ok();
    if (!Get(key).is_number()) return Error(key, "a number");
    *out = Get(key).get<double>();
    return Status::Ok();
  }
  // A positive integer up to 2^30 (a pixel size).
  Status Size(const nlohmann::json& v, const std::string& name, int* out) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxSide) {
      return InvalidArgumentError("{}: field '{}{}' must be an integer in [1, 2^30], got {}",
                                  source_, prefix_, name, v.dump());
    }
    *out = static_cast<int>(v.get<int64_t>());
    return Status::Ok();
  }
  // image_mean / image_std: a number (for every channel) or a list of three numbers.
  Status Triple(const char* key, std::array<float, 3>* out) const {
    if (!Has(key)) return Status::Ok();
    const nlohmann::json& v = Get(key);
    if (v.is_number()) {
      out->fill(static_cast<float>(v.get<double>()));
      return Status::Ok();
    }
    if (!v.is_array() || v.size() != 3) return Error(key, "a number or a list of 3 numbers");
    for (int c = 0; c < 3; ++c) {
      if (!v[c].is_number()) return Error(key, "a number or a list of 3 numbers");
      (*out)[c] = static_cast<float>(v[c].get<double>());
    }
    return Status::Ok();
  }
  Status Error(const char* key, const char* what) const {
    return InvalidArgumentError("{}: field '{}{}' must be {}, got {}", source_, prefix_, key, what,
                                Get(key).dump());
  }
  std::string Field(const std::string& key) const { return prefix_ + key; }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& obj_;
  const std::string& source_;
  std::string prefix_;
};

// HF's get_size_dict for `size`: an int is {shortest_edge} (both classes have
// default_to_square false), a [h, w] list is {height, width}; dicts must have one of the
// key sets reproduced here.
Status ParseSize(const FieldReader& r, ImagePreprocessParams* p) {
  if (!r.Has("size")) return Status::Ok();
  const nlohmann::json& v = r.Get("size");
  if (v.is_number_integer()) {
    p->resize_rule = ResizeRule::kShortestEdge;
    return r.Size(v, "size", &p->shortest_edge);
  }
  if (v.is_array() && v.size() == 2) {
    p->resize_rule = ResizeRule::kExact;
    XRT_RETURN_IF_ERROR(r.Size(v[0], "size[0]", &p->resize_height));
    return r.Size(v[1], "size[1]", &p->resize_width);
  }
  if (!v.is_object()) return r.Error("size", "an integer, [height, width] or an object");
  if (v.size() == 1 && v.contains("shortest_edge")) {
    p->resize_rule = ResizeRule::kShortestEdge;
    return r.Size(v["shortest_edge"], "size.shortest_edge", &p->shortest_edge);
  }
  if (v.size() == 2 && v.contains("height") && v.contains("width")) {
    p->resize_rule = ResizeRule::kExact;
    XRT_RETURN_IF_ERROR(r.Size(v["height"], "size.height", &p->resize_height));
    return r.Size(v["width"], "size.width", &p->resize_width);
  }
  return UnimplementedError(
      "{}: field '{}' is {}: only {{\"shortest_edge\": S}} and {{\"height\": H, \"width\": W}} "
      "are supported",
      r.source(), r.Field("size"), v.dump());
}

// crop_size: an int is {height: n, width: n}, [h, w] a list, else {height, width}.
Status ParseCropSize(const FieldReader& r, ImagePreprocessParams* p) {
  if (!r.Has("crop_size")) return Status::Ok();
  const nlohmann::json& v = r.Get("crop_size");
  if (v.is_number_integer()) {
    XRT_RETURN_IF_ERROR(r.Size(v, "crop_size", &p->crop_height));
    p->crop_width = p->crop_height;
    return Status::Ok();
  }
  if (v.is_array() && v.size() == 2) {
    XRT_RETURN_IF_ERROR(r.Size(v[0], "crop_size[0]", &p->crop_height));
    return r.Size(v[1], "crop_size[1]", &p->crop_width);
  }
  if (v.is_object() && v.size() == 2 && v.contains("height") && v.contains("width")) {
    XRT_RETURN_IF_ERROR(r.Size(v["height"], "crop_size.height", &p->crop_height));
    return r.Size(v["width"], "crop_size.width", &p->crop_width);
  }
  return UnimplementedError(
      "{}: field '{}' is {}: only an integer, [height, width] or {{\"height\", \"width\"}} is "
      "supported",
      r.source(), r.Field("crop_size"), v.dump());
}

Expected<ImageProcessorKind> ParseKind(const FieldReader& r) {
  const char* key = r.Has("image_processor_type")     ? "image_processor_type"
                    : r.Has("feature_extractor_type") ? "feature_extractor_type"
                                                      : nullptr;
  if (!key) {
    return InvalidArgumentError("{}: no field '{}' (or '{}') naming the image processor class",
                                r.source(), r.Field("image_processor_type"),
                                r.Field("feature_extractor_type"));
  }
  if (!r.Get(key).is_string()) return r.Error(key, "a string");
  const std::string name = r.Get(key).get<std::string>();
  for (const char* suffix : {"", "Fast", "Pil"}) {
    if (name == std::string("CLIPImageProcessor") + suffix) return ImageProcessorKind::kClip;
    if (name == std::string("SiglipImageProcessor") + suffix) return ImageProcessorKind::kSiglip;
  }
  if (name == "CLIPFeatureExtractor") return ImageProcessorKind::kClip;
  return UnimplementedError(
      "{}: field '{}' is \"{}\": only CLIPImageProcessor and SiglipImageProcessor are supported",
      r.source(), r.Field(key), name);
}

}  // namespace

const char* ImageProcessorKindName(ImageProcessorKind kind) {
  return kind == ImageProcessorKind::kClip ? "CLIPImageProcessor" : "SiglipImageProcessor";
}

Expected<ImagePreprocessParams> ParseImageProcessorConfig(const nlohmann::json& j,
                                                          const std::string& source) {
  if (!j.is_object()) return InvalidArgumentError("{}: not a JSON object", source);
  // processor_config.json nests the image processor's fields under "image_processor".
  const bool nested = j.contains("image_processor");
  if (nested && !j.at("image_processor").is_object()) {
    return InvalidArgumentError("{}: field 'image_processor' must be an object", source);
  }
  const nlohmann::json& obj = nested ? j.at("image_processor") : j;
  FieldReader r(obj, source, nested ? "image_processor." : "");

  ImagePreprocessParams p;
  XRT_ASSIGN_OR_RETURN(p.processor, ParseKind(r));
  if (p.processor == ImageProcessorKind::kSiglip) {
    // SiglipImageProcessor's class defaults (IMAGENET_STANDARD mean / std, 224 x 224).
    p.resize_rule = ResizeRule::kExact;
    p.resize_height = p.resize_width = 224;
    p.do_center_crop = false;
    p.image_mean = {0.5f, 0.5f, 0.5f};
    p.image_std = {0.5f, 0.5f, 0.5f};
  }
  XRT_RETURN_IF_ERROR(r.Bool("do_convert_rgb", &p.do_convert_rgb));
  XRT_RETURN_IF_ERROR(r.Bool("do_resize", &p.do_resize));
  XRT_RETURN_IF_ERROR(ParseSize(r, &p));
  if (r.Has("resample")) {
    const nlohmann::json& v = r.Get("resample");
    if (!v.is_number_integer()) return r.Error("resample", "an integer (PIL resampling filter)");
    if (v.get<int64_t>() != kResampleBicubic) {
      return UnimplementedError("{}: field '{}' is {}: only 3 (PIL.Image.BICUBIC) is supported",
                                source, r.Field("resample"), v.dump());
    }
  }
  XRT_RETURN_IF_ERROR(r.Bool("do_center_crop", &p.do_center_crop));
  XRT_RETURN_IF_ERROR(ParseCropSize(r, &p));
  if (p.do_center_crop && p.processor == ImageProcessorKind::kSiglip && !r.Has("crop_size")) {
    return InvalidArgumentError("{}: field '{}' is true but there is no '{}'", source,
                                r.Field("do_center_crop"), r.Field("crop_size"));
  }
  XRT_RETURN_IF_ERROR(r.Bool("do_rescale", &p.do_rescale));
  XRT_RETURN_IF_ERROR(r.Number("rescale_factor", &p.rescale_factor));
  if (!std::isfinite(p.rescale_factor)) return r.Error("rescale_factor", "a finite number");
  XRT_RETURN_IF_ERROR(r.Bool("do_normalize", &p.do_normalize));
  XRT_RETURN_IF_ERROR(r.Triple("image_mean", &p.image_mean));
  XRT_RETURN_IF_ERROR(r.Triple("image_std", &p.image_std));
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(p.image_mean[c])) return r.Error("image_mean", "finite numbers");
    if (!std::isfinite(p.image_std[c]) || p.image_std[c] == 0.0f) {
      return r.Error("image_std", "finite, non-zero numbers");
    }
  }
  bool do_pad = false;
  XRT_RETURN_IF_ERROR(r.Bool("do_pad", &do_pad));
  if (do_pad) {
    return UnimplementedError("{}: field '{}' is true: padding is not supported", source,
                              r.Field("do_pad"));
  }
  return p;
}

Expected<ImageSize> ResizeOutputSize(const ImagePreprocessParams& p, ImageSize in) {
  if (in.height < 1 || in.width < 1) {
    return InvalidArgumentError("image size {} x {} is empty", in.width, in.height);
  }
  if (!p.do_resize) return in;
  int64_t h, w;
  if (p.resize_rule == ResizeRule::kExact) {
    h = p.resize_height;
    w = p.resize_width;
  } else {
    // transformers get_resize_output_image_size(default_to_square=False): the short side
    // becomes S, the long side int(S * long / short) (true division, truncated).
    const int64_t s = p.shortest_edge;
    const int64_t short_side = std::min(in.width, in.height);
    const int64_t long_side = std::max(in.width, in.height);
    const int64_t new_long =
        static_cast<int64_t>(static_cast<double>(s * long_side) / static_cast<double>(short_side));
    if (in.width <= in.height) {
      h = new_long;
      w = s;
    } else {
      h = s;
      w = new_long;
    }
  }
  if (h < 1 || w < 1 || h > kMaxSide || w > kMaxSide || h * w > kMaxPixels) {
    return InvalidArgumentError("resizing a {} x {} image gives {} x {}, beyond the limit",
                                in.width, in.height, w, h);
  }
  return ImageSize{static_cast<int>(h), static_cast<int>(w)};
}

Expected<ImageSize> PreprocessOutputSize(const ImagePreprocessParams& p, ImageSize in) {
  if (p.do_center_crop) {
    if (in.height < 1 || in.width < 1) {
      return InvalidArgumentError("image size {} x {} is empty", in.width, in.height);
    }
    return ImageSize{p.crop_height, p.crop_width};
  }
  return ResizeOutputSize(p, in);
}

std::optional<ImageSize> FixedOutputSize(const ImagePreprocessParams& p) {
  if (p.do_center_crop) return ImageSize{p.crop_height, p.crop_width};
  if (p.do_resize && p.resize_rule == ResizeRule::kExact) {
    return ImageSize{p.resize_height, p.resize_width};
  }
  return std::nullopt;
}

Status PreprocessImage(const DecodedImage& img, const ImagePreprocessParams& p, float* out_chw) {
  if (img.width < 1 || img.height < 1 ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3) {
    return InvalidArgumentError("image of {} x {} has {} bytes of RGB", img.width, img.height,
                                img.rgb.size());
  }
  if (p.do_resize && p.resample != kResampleBicubic) {
    return UnimplementedError("resample {}: only 3 (BICUBIC) is supported", p.resample);
  }
  if (!p.do_convert_rgb && (img.source_mode != "RGB" || img.composited)) {
    return UnimplementedError(
        "do_convert_rgb is false and the image is mode {}{}: HF would not process it as 3-channel "
        "RGB",
        img.source_mode, img.composited ? " with transparency" : "");
  }
  XRT_ASSIGN_OR_RETURN(ImageSize rs, ResizeOutputSize(p, ImageSize{img.height, img.width}));
  XRT_ASSIGN_OR_RETURN(ImageSize out, PreprocessOutputSize(p, ImageSize{img.height, img.width}));
  // The crop's offset into the resized image: floor((H - h) / 2) both when cropping and when
  // HF's center_crop pads (the padded image is then cropped back to this same window).
  auto floor_half = [](int64_t d) { return d >= 0 ? d / 2 : -((-d + 1) / 2); };
  const int64_t oy = p.do_center_crop ? floor_half(int64_t{rs.height} - out.height) : 0;
  const int64_t ox = p.do_center_crop ? floor_half(int64_t{rs.width} - out.width) : 0;
  // The part of the resized image inside the output.
  const int y0 = static_cast<int>(std::max<int64_t>(oy, 0));
  const int y1 = static_cast<int>(std::min<int64_t>(oy + out.height, rs.height));
  const int x0 = static_cast<int>(std::max<int64_t>(ox, 0));
  const int x1 = static_cast<int>(std::min<int64_t>(ox + out.width, rs.width));
  std::vector<uint8_t> window;
  if (y0 < y1 && x0 < x1) {
    if (p.do_resize) {
      window = BicubicResizeWindow(img.rgb.data(), img.width, img.height, rs.width, rs.height, x0,
                                   x1, y0, y1);
    } else {
      window.reserve(static_cast<size_t>(x1 - x0) * (y1 - y0) * 3);
      for (int y = y0; y < y1; ++y) {
        const uint8_t* row = img.rgb.data() + (static_cast<size_t>(y) * img.width + x0) * 3;
        window.insert(window.end(), row, row + static_cast<size_t>(x1 - x0) * 3);
      }
    }
  }
  // Per channel, the float of each uint8 value: rescale in float64 then float32, normalize
  // in float32 (numpy's order).
  float lut[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      float x = p.do_rescale ? static_cast<float>(static_cast<double>(v) * p.rescale_factor)
                             : static_cast<float>(v);
      if (p.do_normalize) x = (x - p.image_mean[c]) / p.image_std[c];
      lut[c][v] = x;
    }
  }
  const size_t plane = static_cast<size_t>(out.height) * out.width;
  const int ww = x1 - x0;
  for (int r = 0; r < out.height; ++r) {
    const int64_t sy = oy + r;
    for (int col = 0; col < out.width; ++col) {
      const int64_t sx = ox + col;
      const bool inside = sy >= y0 && sy < y1 && sx >= x0 && sx < x1;
      const uint8_t* px =
          inside ? &window[(static_cast<size_t>(sy - y0) * ww + (sx - x0)) * 3] : nullptr;
      for (int c = 0; c < 3; ++c) {
        out_chw[c * plane + static_cast<size_t>(r) * out.width + col] = lut[c][px ? px[c] : 0];
      }
    }
  }
  return Status::Ok();
}

std::string ImageHash::Hex() const {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(64, '0');
  for (int i = 0; i < 32; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

ImageHash HashImage(const DecodedImage& img, const ImagePreprocessParams& p) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  auto put = [&](const void* data, size_t n) { EVP_DigestUpdate(ctx, data, n); };
  auto put_i64 = [&](int64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    put(b, 8);
  };
  auto put_bits = [&](const auto& v) {  // IEEE bits, little-endian host (x86-64)
    uint8_t b[sizeof(v)];
    std::memcpy(b, &v, sizeof(v));
    put(b, sizeof(v));
  };
  static const char kTag[] = "xrt.image.v1";
  put(kTag, sizeof(kTag));
  put_i64(img.width);
  put_i64(img.height);
  put_i64(static_cast<int64_t>(img.rgb.size()));
  put(img.rgb.data(), img.rgb.size());
  for (int64_t v : {int64_t(p.processor), int64_t(p.do_convert_rgb), int64_t(p.do_resize),
                    int64_t(p.resize_rule), int64_t(p.shortest_edge), int64_t(p.resize_height),
                    int64_t(p.resize_width), int64_t(p.resample), int64_t(p.do_center_crop),
                    int64_t(p.crop_height), int64_t(p.crop_width), int64_t(p.do_rescale),
                    int64_t(p.do_normalize)}) {
    put_i64(v);
  }
  put_bits(p.rescale_factor);
  for (int c = 0; c < 3; ++c) put_bits(p.image_mean[c]);
  for (int c = 0; c < 3; ++c) put_bits(p.image_std[c]);
  ImageHash h;
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, h.bytes.data(), &len);
  EVP_MD_CTX_free(ctx);
  return h;
}

}  // namespace xrt
