// libFuzzer target: bytes -> adapter_config.json of a PEFT adapter directory whose
// adapter_model.safetensors is the committed fixture tests/fixtures/lora/llama_gqa/
// a_all_r8 (the safetensors reader has its own fuzzer), loaded against the llama_gqa
// LoRA spec (runtime/lora/peft_adapter.h). Must never crash; an adapter that loads is
// packed and has the spec's shape (one A / Bᵀ pair per target, R rows each, rank <= R).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/lora/peft_adapter.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

namespace fs = std::filesystem;

// A private directory holding the fixture's weights; the config is rewritten per input.
const fs::path& AdapterDir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("xcc_fuzz_peft_" + std::to_string(getpid()));
    fs::create_directories(d);
    fs::copy_file(fs::path(XCC_SOURCE_DIR) /
                      "tests/fixtures/lora/llama_gqa/a_all_r8/adapter_model.safetensors",
                  d / "adapter_model.safetensors", fs::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = AdapterDir();
  {
    std::ofstream out(dir / "adapter_config.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  // llama_gqa: 2 layers, hidden 64, intermediate 176, 4 heads / 2 kv, head_dim 16; R = 8.
  static const xrt::LoraSpec spec =
      xrt::MakeLoraSpec(2, 64, 176, 4, 2, 16, 8, xrt::AllLoraTargetModules());
  auto packed = xrt::LoadPeftAdapter("fuzz", dir.string(), spec);
  xrt::fuzz::CheckNotInternal(packed.status());
  if (!packed.ok()) return 0;
  XCC_FUZZ_CHECK(packed->rank >= 1 && packed->rank <= spec.max_lora_rank, "rank out of range");
  XCC_FUZZ_CHECK(
      packed->a.size() == spec.targets.size() && packed->bt.size() == spec.targets.size(),
      "one A / Bt pair per target");
  for (size_t t = 0; t < spec.targets.size(); ++t) {
    const size_t r = static_cast<size_t>(spec.max_lora_rank);
    XCC_FUZZ_CHECK(packed->a[t].empty() || packed->a[t].size() == r * spec.targets[t].in_features,
                   "A of " + spec.targets[t].name);
    XCC_FUZZ_CHECK(
        packed->bt[t].empty() || packed->bt[t].size() == r * spec.targets[t].out_features,
        "Bt of " + spec.targets[t].name);
  }
  return 0;
}
