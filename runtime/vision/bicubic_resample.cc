// Pillow's BICUBIC resampling on RGB8 (bicubic_resample.h). Every floating-point step
// follows src/libImaging/Resample.c in the same order and precision; this file is built
// with -ffp-contract=off so no multiply-add is fused where Pillow's build does not fuse.
#include "runtime/vision/bicubic_resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace xrt {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS
constexpr double kSupport = 2.0;            // the bicubic filter's support

double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

inline uint8_t Clip8(int32_t v) {
  int32_t s = v >> kPrecisionBits;  // arithmetic shift, as Pillow's table lookup
  return static_cast<uint8_t>(s < 0 ? 0 : s > 255 ? 255 : s);
}

// Fixed-point weights of output indices [o0, o1) of one axis resized in_size -> out_size.
struct AxisWeights {
  std::vector<int> first;      // first input index of each output's window
  std::vector<int> count;      // window length
  std::vector<size_t> offset;  // into k
  std::vector<int32_t> k;
  int lo = 0, hi = 0;  // union of the windows: input indices [lo, hi)
};

AxisWeights ComputeAxis(int in_size, int out_size, int o0, int o1) {
  AxisWeights w;
  // Pillow: (double)(in1 - in0) / outSize with a float box (0, in_size).
  const double scale = static_cast<double>(static_cast<float>(in_size) - 0.0f) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kSupport * filterscale;
  const double inv_filterscale = 1.0 / filterscale;
  std::vector<double> tmp;
  w.lo = in_size;
  w.hi = 0;
  for (int xx = o0; xx < o1; ++xx) {
    const double center = 0.0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    tmp.assign(static_cast<size_t>(xmax), 0.0);
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double v = Bicubic((x + xmin - center + 0.5) * inv_filterscale);
      tmp[x] = v;
      ww += v;
    }
    if (ww != 0.0) {
      for (int x = 0; x < xmax; ++x) tmp[x] /= ww;
    }
    w.first.push_back(xmin);
    w.count.push_back(xmax);
    w.offset.push_back(w.k.size());
    for (int x = 0; x < xmax; ++x) {
      double v = tmp[x] * (1 << kPrecisionBits);
      w.k.push_back(tmp[x] < 0 ? static_cast<int32_t>(-0.5 + v) : static_cast<int32_t>(0.5 + v));
    }
    if (xmax > 0) {
      w.lo = std::min(w.lo, xmin);
      w.hi = std::max(w.hi, xmin + xmax);
    }
  }
  if (w.hi < w.lo) w.lo = w.hi = 0;
  return w;
}

// An RGB8 buffer of `width` x `height` pixels.
struct Plane {
  int width = 0, height = 0;
  std::vector<uint8_t> px;
  uint8_t* row(int y) { return px.data() + static_cast<size_t>(y) * width * 3; }
  const uint8_t* row(int y) const { return px.data() + static_cast<size_t>(y) * width * 3; }
};

// Columns [c0, c1) and rows [r0, r1) of `src` (stride src_w pixels).
Plane CopyRect(const uint8_t* src, int src_w, int c0, int c1, int r0, int r1) {
  Plane p{c1 - c0, r1 - r0, {}};
  p.px.resize(static_cast<size_t>(p.width) * p.height * 3);
  for (int y = r0; y < r1; ++y) {
    std::memcpy(p.row(y - r0), src + (static_cast<size_t>(y) * src_w + c0) * 3,
                static_cast<size_t>(p.width) * 3);
  }
  return p;
}

// Horizontal pass over every row of `in`, whose column 0 is input column `col_base`.
Plane Horizontal(const Plane& in, int col_base, const AxisWeights& w) {
  Plane out{static_cast<int>(w.first.size()), in.height, {}};
  out.px.resize(static_cast<size_t>(out.width) * out.height * 3);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* line = in.row(y);
    uint8_t* o = out.row(y);
    for (int xx = 0; xx < out.width; ++xx) {
      const int32_t* k = w.k.data() + w.offset[xx];
      const uint8_t* p = line + static_cast<size_t>(w.first[xx] - col_base) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < w.count[xx]; ++x) {
        s0 += p[3 * x] * k[x];
        s1 += p[3 * x + 1] * k[x];
        s2 += p[3 * x + 2] * k[x];
      }
      o[3 * xx] = Clip8(s0);
      o[3 * xx + 1] = Clip8(s1);
      o[3 * xx + 2] = Clip8(s2);
    }
  }
  return out;
}

// Vertical pass over every column of `in`, whose row 0 is input row `row_base`.
Plane Vertical(const Plane& in, int row_base, const AxisWeights& w) {
  Plane out{in.width, static_cast<int>(w.first.size()), {}};
  out.px.resize(static_cast<size_t>(out.width) * out.height * 3);
  const size_t stride = static_cast<size_t>(in.width) * 3;
  for (int yy = 0; yy < out.height; ++yy) {
    const int32_t* k = w.k.data() + w.offset[yy];
    const uint8_t* base = in.row(w.first[yy] - row_base);
    uint8_t* o = out.row(yy);
    for (size_t i = 0; i < stride; ++i) {
      int32_t s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < w.count[yy]; ++y) s += base[y * stride + i] * k[y];
      o[i] = Clip8(s);
    }
  }
  return out;
}

// One axis of the resize for output indices [o0, o1): its weights when the axis changes
// size, and the input indices [lo, hi) those outputs read ([o0, o1) itself when it does not).
struct AxisPlan {
  bool resize = false;
  AxisWeights w;
  int lo = 0, hi = 0;
};

AxisPlan PlanAxis(int in_size, int out_size, int o0, int o1) {
  AxisPlan a;
  a.resize = in_size != out_size;
  a.lo = o0;
  a.hi = o1;
  if (a.resize) {
    a.w = ComputeAxis(in_size, out_size, o0, o1);
    a.lo = a.w.lo;
    a.hi = a.w.hi;
  }
  return a;
}

}  // namespace

std::vector<uint8_t> BicubicResizeWindow(const uint8_t* src, int in_w, int in_h, int out_w,
                                         int out_h, int x0, int x1, int y0, int y1) {
  const AxisPlan h = PlanAxis(in_w, out_w, x0, x1);
  const AxisPlan v = PlanAxis(in_h, out_h, y0, y1);
  Plane p = CopyRect(src, in_w, h.lo, h.hi, v.lo, v.hi);
  // Pillow 13's ImagingResampleInner: when the height shrinks by more than twice what the
  // width shrinks, the vertical pass runs first (the uint8 intermediate then differs).
  const bool vertical_first =
      (int64_t{in_h} - out_h) > 0 && (int64_t{in_h} - out_h) > (int64_t{in_w} - out_w) * 2;
  if (vertical_first && v.resize) p = Vertical(p, v.lo, v.w);
  if (h.resize) p = Horizontal(p, h.lo, h.w);
  if (!vertical_first && v.resize) p = Vertical(p, v.lo, v.w);
  return std::move(p.px);
}

}  // namespace xrt
