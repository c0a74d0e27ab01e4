// The PEFT adapters of tests/fixtures/lora (real PEFT output, made by
// tests/gen_lora_fixtures.py) against the llama_gqa artifact's LoRA spec: the
// valid ones load with the rank and modules PEFT resolved; every invalid one is
// one InvalidArgument naming each of its problems (invalid/invalid.json).
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/lora/peft_adapter.h"

namespace xrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path LoraFixtures() { return fs::path(XCC_SOURCE_DIR) / "tests/fixtures/lora"; }

nlohmann::json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// llama_gqa: 2 layers, hidden 64, intermediate 176, 4 heads / 2 kv, head_dim 16.
LoraSpec LlamaGqaSpec(int64_t rank) {
  return MakeLoraSpec(2, 64, 176, 4, 2, 16, rank, AllLoraTargetModules());
}

TEST(PeftFixtures, ValidAdaptersLoadAsPeftResolvedThem) {
  const nlohmann::json ref = ReadJson(LoraFixtures() / "llama_gqa/reference.json");
  const LoraSpec spec = LlamaGqaSpec(ref["max_lora_rank"].get<int64_t>());
  for (const nlohmann::json& a : ref["adapters"]) {
    if (a["dir"].is_null()) continue;
    const std::string name = a["name"];
    SCOPED_TRACE(name);
    auto packed = LoadPeftAdapter(name, (LoraFixtures() / "llama_gqa" / name).string(), spec);
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    EXPECT_EQ(packed->rank, a["max_rank"].get<int64_t>());
    std::set<std::string> modules;
    for (const nlohmann::json& m : a["modules"]) {
      const std::string full = m["module"];
      modules.insert(full.substr(full.rfind('.') + 1));
    }
    EXPECT_EQ(std::set<std::string>(packed->modules.begin(), packed->modules.end()), modules);
  }
}

TEST(PeftFixtures, InvalidAdaptersNameEveryProblem) {
  const nlohmann::json inv = ReadJson(LoraFixtures() / "invalid/invalid.json");
  const LoraSpec spec = LlamaGqaSpec(inv["max_lora_rank"].get<int64_t>());
  // What the message says for each problem kind of invalid.json.
  const std::map<std::string, std::string> says = {
      {"rank", "greater than max_lora_rank"}, {"dora", "DoRA"},
      {"modules_to_save", "modules_to_save"}, {"bias", "bias"},
      {"target_modules", "lm_head"},          {"shape", "shape"},
  };
  for (const nlohmann::json& a : inv["adapters"]) {
    const std::string name = a["name"];
    SCOPED_TRACE(name);
    auto packed = LoadPeftAdapter(
        name, (LoraFixtures() / "invalid" / a["dir"].get<std::string>()).string(), spec);
    ASSERT_FALSE(packed.ok());
    EXPECT_EQ(packed.status().code(), StatusCode::kInvalidArgument);
    const std::string msg = packed.status().message();
    EXPECT_THAT(msg, HasSubstr("'" + name + "'"));
    for (const nlohmann::json& p : a["problems"])
      EXPECT_THAT(msg, HasSubstr(says.at(p.get<std::string>()))) << "problem " << p;
  }
}

}  // namespace
}  // namespace xrt
