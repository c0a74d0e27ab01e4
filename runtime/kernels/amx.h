// Internal to runtime/kernels: the AMX tile configuration (LDTILECFG's
// operand) and a scope that holds one on this thread, for the amx tier's
// kernels (cpu_isa.h). With XRT_SIMD_EMULATE the tile instructions are
// simd_emulate.h's.
#pragma once

#include <cstdint>

#include "runtime/kernels/simd.h"

#if defined(__x86_64__)

namespace xrt {

// Palette 1: for each tile register used, its rows (at most 16) and bytes per
// row (at most 64); the others unused.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  constexpr AmxTileConfig& Tile(int t, int tile_rows, int bytes_per_row) {
    rows[t] = static_cast<uint8_t>(tile_rows);
    colsb[t] = static_cast<uint16_t>(bytes_per_row);
    return *this;
  }
};
static_assert(sizeof(AmxTileConfig) == 64);

XRT_TARGET_AMX inline void LoadAmxTileConfig(const AmxTileConfig& config) {
  _tile_loadconfig(&config);
}
XRT_TARGET_AMX inline void ReleaseAmxTiles() { _tile_release(); }

// While alive, this thread's tiles are configured as *config (null: nothing
// happens); released after, so the OS need not save the tile state on a
// switch.
class AmxTileScope {
 public:
  explicit AmxTileScope(const AmxTileConfig* config) : on_(config != nullptr) {
    if (on_) LoadAmxTileConfig(*config);
  }
  ~AmxTileScope() {
    if (on_) ReleaseAmxTiles();
  }
  AmxTileScope(const AmxTileScope&) = delete;
  AmxTileScope& operator=(const AmxTileScope&) = delete;

 private:
  bool on_;
};

}  // namespace xrt

#endif  // __x86_64__
