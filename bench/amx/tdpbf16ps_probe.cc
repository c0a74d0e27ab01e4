// How this CPU's AMX TDPBF16PS sums, against Intel's definition (a rounding
// per product, each pair's even element first) and against vdpbf16ps: one
// output element, a C start value and up to 32 bf16 products a[i] * 1.
// Standalone (not built by CMake); bench/README.md has the command and the
// answers of a Sapphire Rapids-class CPU.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <utility>

namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

uint16_t Bf16(float x) {  // the values below are exact in bf16
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

// C[0][0] = c + sum of a[i] (element i of A's row 0, times a B of ones) on
// TDPBF16PS, and the same sum on vdpbf16ps (pairs in order).
std::pair<float, float> Sum(float c, std::initializer_list<std::pair<int, float>> a) {
  TileConfig config;
  for (int t = 0; t < 3; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
  alignas(64) float tile_c[16 * 16] = {};
  alignas(64) uint16_t tile_a[16 * 32] = {}, tile_b[16 * 32] = {};
  tile_c[0] = c;
  for (auto [i, x] : a) {
    tile_a[i] = Bf16(x);
    tile_b[i / 2 * 32 + i % 2] = Bf16(1.0f);  // row i / 2 (k-pair), column 0
  }
  _tile_loadd(0, tile_c, 64);
  _tile_loadd(1, tile_a, 64);
  _tile_loadd(2, tile_b, 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, tile_c, 64);
  _tile_release();
  __m512 v = _mm512_mask_mov_ps(_mm512_setzero_ps(), 1, _mm512_set1_ps(c));
  for (int p = 0; p < 16; ++p) {
    const uint32_t x = static_cast<uint32_t>(tile_a[2 * p]) | uint32_t{tile_a[2 * p + 1]} << 16;
    const uint32_t y = static_cast<uint32_t>(tile_b[p * 32]) | uint32_t{tile_b[p * 32 + 1]} << 16;
    v = _mm512_dpbf16_ps(v, (__m512bh)_mm512_set1_epi32(static_cast<int>(x)),
                         (__m512bh)_mm512_set1_epi32(static_cast<int>(y)));
  }
  return {tile_c[0], _mm512_cvtss_f32(v)};
}

}  // namespace

#define PROBE(c, ...)                                                                        \
  do {                                                                                       \
    const auto [amx, vdp] = Sum(c, {__VA_ARGS__});                                           \
    std::printf("%-58s TDPBF16PS %-14.9g vdpbf16ps %.9g\n", #c ": " #__VA_ARGS__, amx, vdp); \
  } while (0)

int main() {
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
    std::fprintf(stderr, "no permission for the AMX tile state\n");
    return 1;
  }
  const float e = std::ldexp(1.0f, -24);  // half an ulp of 1
  PROBE(1.0f, {0, e}, {1, e});            // one pair: definition 1, exact 1 + 2^-23
  PROBE(1.0f, {0, e}, {2, e});            // two pairs' even elements
  PROBE(1.0f, {0, e / 2}, {2, e / 2}, {4, e / 2}, {6, e / 2}, {8, e / 2}, {10, e / 2}, {12, e / 2},
        {14, e / 2});                          // eight products of 2^-25: definition 1
  PROBE(0.0f, {0, 1.0f}, {1, -1.0f}, {2, e});  // exact 2^-24
  PROBE(0.0f, {0, 1.0f}, {1, -1.0f}, {3, e});  // the same, e an odd element
  PROBE(0.0f, {0, 1.0f}, {2, -1.0f}, {4, e});  // all even elements
  PROBE(0.0f, {0, 1.0f}, {2, std::ldexp(1.0f, -22)}, {4, -1.0f});
  PROBE(0.0f, {0, 1.0f}, {2, std::ldexp(1.0f, -26)}, {4, -1.0f});
  PROBE(0.0f, {0, 1048576.0f}, {1, std::ldexp(1.0f, -22)}, {2, -1048576.0f});
  PROBE(0.0f, {0, 1048576.0f}, {2, std::ldexp(1.0f, -22)}, {4, -1048576.0f});
  PROBE(1.0f, {0, e}, {1, std::ldexp(1.0f, -30)});  // sticky bits across the pair
  return 0;
}
