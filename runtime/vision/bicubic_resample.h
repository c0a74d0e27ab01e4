// Pillow's BICUBIC resize of an RGB8 image (src/libImaging/Resample.c and Image.resize),
// reproduced bit for bit:
//   - Keys cubic with a = -0.5, support 2, widened by in/out when downscaling;
//   - per output index: center = (i + 0.5) * scale, window [int(center - support + 0.5),
//     int(center + support + 0.5)) clamped to the input, weights f((j - center + 0.5) /
//     filterscale) normalized to sum 1, then rounded to 22-bit fixed point;
//   - accumulator starts at 2^21, result >> 22 clipped to 0..255;
//   - separable: horizontal pass into a uint8 intermediate, then vertical; a pass whose
//     dimension does not change is skipped; an unchanged size is a copy;
//   - the order of the passes is Pillow 13.0's: vertical first when the height shrinks by
//     more than twice as many pixels as the width (in_h - out_h > 2 * (in_w - out_w)),
//     else horizontal first. (Pillow 12 went horizontal first except for images more than
//     100 times taller than wide; the uint8 intermediate makes the order visible.)
// Only a window of the output is computed (what a center crop keeps); every pixel in it
// equals the pixel of the full resize.
//
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <vector>

namespace xrt {

// Resizes `src` (in_w x in_h RGB8) to out_w x out_h and returns the output pixels of
// rows [y0, y1) and columns [x0, x1) (row-major RGB8, (x1 - x0) * 3 bytes a row).
// Requires 0 <= x0 < x1 <= out_w, 0 <= y0 < y1 <= out_h and positive sizes.
std::vector<uint8_t> BicubicResizeWindow(const uint8_t* src, int in_w, int in_h, int out_w,
                                         int out_h, int x0, int x1, int y0, int y1);

}  // namespace xrt
