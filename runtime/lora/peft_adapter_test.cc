// LoadPeftAdapter on adapter directories built by the tests (adapter_config.json and a
// safetensors file written with the frontend's test writer), the packed values compared
// with values computed here from PEFT's definitions; every error case; the packed layout.
#include "runtime/lora/peft_adapter.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/frontend/test_util.h"

namespace xrt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using xcc::testing::SafetensorsWriter;
using xcc::testing::TempDir;
using xcc::testing::WriteFile;
using Json = nlohmann::ordered_json;

// A tiny decoder: 2 layers, hidden 4, intermediate 6, 2 heads of 2, 1 KV head; R = 4.
// Shapes (in -> out): q 4->4, k 4->2, v 4->2, o 4->4, gate 4->6, up 4->6, down 6->4.
LoraSpec TinySpec(std::vector<std::string> modules = AllLoraTargetModules(), int64_t rank = 4) {
  return MakeLoraSpec(/*num_layers=*/2, /*hidden=*/4, /*intermediate=*/6, /*num_heads=*/2,
                      /*num_kv_heads=*/1, /*head_dim=*/2, rank, std::move(modules));
}

int64_t TargetOf(const LoraSpec& spec, const std::string& name) {
  for (size_t t = 0; t < spec.targets.size(); ++t) {
    if (spec.targets[t].name == name) return static_cast<int64_t>(t);
  }
  ADD_FAILURE() << "no target " << name;
  return -1;
}

// Distinct, exactly representable (in f16 and bf16 too) values: base + i / 8.
std::vector<float> Ramp(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i % 16) * 0.125f - 1.0f;
  return v;
}

uint16_t ToBf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);  // exact for the values used
}

using Pair = std::pair<std::vector<float>, std::vector<float>>;  // lora_A, lora_B

// One adapter directory under construction.
struct AdapterDir {
  Json config = {{"peft_type", "LORA"},
                 {"base_model_name_or_path", "tiny-llama"},
                 {"r", 2},
                 {"lora_alpha", 4},
                 {"target_modules", {"q_proj", "v_proj"}},
                 {"lora_dropout", 0.05},
                 {"fan_in_fan_out", false},
                 {"bias", "none"},
                 {"use_rslora", false},
                 {"modules_to_save", nullptr},
                 {"rank_pattern", Json::object()},
                 {"alpha_pattern", Json::object()},
                 {"use_dora", false}};
  SafetensorsWriter weights;

  // lora_A [r, in] and lora_B [out, r] of `module` (a path without "base_model.model."),
  // stored as `dtype` ("F32", "F16", "BF16"); returns {A, B} as floats.
  Pair AddPair(const std::string& module, int64_t r, int64_t in, int64_t out,
               const std::string& dtype = "F32", float base = 0.25f) {
    std::vector<float> a = Ramp(r * in, base), b = Ramp(out * r, base + 0.5f);
    Add("base_model.model." + module + ".lora_A.weight", {r, in}, a, dtype);
    Add("base_model.model." + module + ".lora_B.weight", {out, r}, b, dtype);
    return {a, b};
  }
  void Add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v,
           const std::string& dtype = "F32") {
    if (dtype == "F32") {
      weights.AddF32(name, std::move(shape), v);
      return;
    }
    std::vector<uint16_t> bits;
    for (float f : v) bits.push_back(dtype == "F16" ? xcc::testing::FloatToHalf(f) : ToBf16(f));
    weights.Add(name, dtype, std::move(shape), xcc::testing::Bytes(bits));
  }

  std::string Write(const TempDir& tmp, const std::string& sub = "adapter") const {
    std::string dir = tmp.File(sub);
    mkdir(dir.c_str(), 0755);
    WriteFile(dir + "/adapter_config.json", config.dump(2));
    WriteFile(dir + "/adapter_model.safetensors", weights.Build());
    return dir;
  }
};

std::string Attn(int l, const std::string& m) {
  return "model.layers." + std::to_string(l) + ".self_attn." + m;
}
std::string Mlp(int l, const std::string& m) {
  return "model.layers." + std::to_string(l) + ".mlp." + m;
}

// Expected slot contents: A padded to R rows; (scaling * B)ᵀ padded to R rows.
std::vector<float> PaddedA(const std::vector<float>& a, int64_t rank_r, int64_t in) {
  std::vector<float> out(static_cast<size_t>(rank_r * in), 0.0f);
  std::copy(a.begin(), a.end(), out.begin());
  return out;
}
std::vector<float> PaddedBt(const std::vector<float>& b, float scaling, int64_t r, int64_t out_f,
                            int64_t rank_r) {
  std::vector<float> out(static_cast<size_t>(rank_r * out_f), 0.0f);
  for (int64_t o = 0; o < out_f; ++o) {
    for (int64_t k = 0; k < r; ++k) out[k * out_f + o] = scaling * b[o * r + k];
  }
  return out;
}

// Expects the slot of target `module` to hold `pair` (lora_A, lora_B of rank r): A padded
// to R rows, (scaling * B)ᵀ padded to R rows.
void ExpectSlot(const PackedLora& p, const LoraSpec& spec, const std::string& module,
                const Pair& pair, float scaling, int64_t r) {
  int64_t t = TargetOf(spec, module);
  ASSERT_GE(t, 0);
  const LoraTarget& target = spec.targets[t];
  EXPECT_EQ(p.a[t], PaddedA(pair.first, spec.max_lora_rank, target.in_features)) << module;
  EXPECT_EQ(p.bt[t], PaddedBt(pair.second, scaling, r, target.out_features, spec.max_lora_rank))
      << module;
}

std::string ErrorOf(const Expected<PackedLora>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

// "name INxOUT" per target.
std::vector<std::string> Describe(const LoraSpec& spec) {
  std::vector<std::string> out;
  for (const LoraTarget& t : spec.targets) {
    out.push_back(t.name + " " + std::to_string(t.in_features) + "x" +
                  std::to_string(t.out_features));
  }
  return out;
}

TEST(LoraSpecTest, TargetsInLayerThenModuleOrderWithHfShapes) {
  LoraSpec spec = TinySpec({"down_proj", "q_proj", "k_proj"}, 8);
  EXPECT_EQ(spec.max_lora_rank, 8);
  EXPECT_EQ(spec.target_modules, (std::vector<std::string>{"q_proj", "k_proj", "down_proj"}));
  EXPECT_EQ(Describe(spec),
            (std::vector<std::string>{
                "model.layers.0.self_attn.q_proj 4x4", "model.layers.0.self_attn.k_proj 4x2",
                "model.layers.0.mlp.down_proj 6x4", "model.layers.1.self_attn.q_proj 4x4",
                "model.layers.1.self_attn.k_proj 4x2", "model.layers.1.mlp.down_proj 6x4"}));

  LoraSpec all = MakeLoraSpec(1, 8, 20, 4, 2, 3, 4, AllLoraTargetModules());
  EXPECT_EQ(Describe(all),
            (std::vector<std::string>{
                "model.layers.0.self_attn.q_proj 8x12", "model.layers.0.self_attn.k_proj 8x6",
                "model.layers.0.self_attn.v_proj 8x6", "model.layers.0.self_attn.o_proj 12x8",
                "model.layers.0.mlp.gate_proj 8x20", "model.layers.0.mlp.up_proj 8x20",
                "model.layers.0.mlp.down_proj 20x8"}));
}

TEST(LoraSpecTest, ValidateTargetModules) {
  EXPECT_EQ(AllLoraTargetModules(),
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                      "up_proj", "down_proj"}));
  EXPECT_TRUE(ValidateLoraTargetModules({"v_proj", "q_proj"}).ok());
  Status unknown = ValidateLoraTargetModules({"q_proj", "lm_head"});
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("'lm_head' is not one of q_proj, k_proj"));
  EXPECT_THAT(ValidateLoraTargetModules({"q_proj", "q_proj"}).message(), HasSubstr("twice"));
  EXPECT_THAT(ValidateLoraTargetModules({}).message(), HasSubstr("empty"));
}

TEST(PeftAdapterTest, PacksPaddedATransposedScaledBAndLeavesOthersEmpty) {
  TempDir tmp;
  AdapterDir d;  // r 2, alpha 4: scaling 2
  auto q0 = d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  auto v1 = d.AddPair(Attn(1, "v_proj"), 2, 4, 2, "F32", 1.5f);
  LoraSpec spec = TinySpec();
  Expected<PackedLora> r = LoadPeftAdapter("sql", d.Write(tmp), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name, "sql");
  EXPECT_EQ(r->path, tmp.File("adapter"));
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(r->base_model_name_or_path, "tiny-llama");
  ASSERT_EQ(r->a.size(), spec.targets.size());
  ASSERT_EQ(r->bt.size(), spec.targets.size());
  int64_t tq = TargetOf(spec, Attn(0, "q_proj")), tv = TargetOf(spec, Attn(1, "v_proj"));
  ExpectSlot(*r, spec, Attn(0, "q_proj"), q0, 2.0f, 2);
  ExpectSlot(*r, spec, Attn(1, "v_proj"), v1, 2.0f, 2);
  // By hand: A[0][1] = 0.25 + 1/8 - 1; Bᵀ[1][0] = 2 * B[0][1] = 2 * (0.75 + 1/8 - 1).
  EXPECT_EQ(r->a[tq][0 * 4 + 1], -0.625f);
  EXPECT_EQ(r->bt[tq][1 * 4 + 0], -0.25f);
  for (size_t t = 0; t < spec.targets.size(); ++t) {
    if (static_cast<int64_t>(t) == tq || static_cast<int64_t>(t) == tv) continue;
    EXPECT_TRUE(r->a[t].empty()) << spec.targets[t].name;
    EXPECT_TRUE(r->bt[t].empty()) << spec.targets[t].name;
  }
}

TEST(PeftAdapterTest, RsLoraScalesByAlphaOverSqrtR) {
  TempDir tmp;
  AdapterDir d;
  d.config["r"] = 4;
  d.config["lora_alpha"] = 8;
  d.config["use_rslora"] = true;  // 8 / sqrt(4) = 4 (plain LoRA: 2)
  auto down = d.AddPair(Mlp(1, "down_proj"), 4, 6, 4);
  LoraSpec spec = TinySpec();
  Expected<PackedLora> r = LoadPeftAdapter("rs", d.Write(tmp), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->a[TargetOf(spec, Mlp(1, "down_proj"))], down.first);  // r == R: no padding
  ExpectSlot(*r, spec, Mlp(1, "down_proj"), down, 4.0f, 4);
  EXPECT_EQ(r->rank, 4);
  EXPECT_EQ(r->modules, (std::vector<std::string>{"down_proj"}));
}

TEST(PeftAdapterTest, RankAndAlphaPatternsMatchLikePeft) {
  TempDir tmp;
  AdapterDir d;  // r 2, alpha 4
  d.config["rank_pattern"] = {{"model.layers.1.self_attn.q_proj", 3}, {"q_proj", 1}, {"_proj", 4}};
  d.config["alpha_pattern"] = {{"layers.1.self_attn.q_proj", 6}, {"mlp\\.(up|gate)_proj", 1}};
  // layer 1 q: first key matches -> r 3, alpha 6 (scaling 2).
  auto q1 = d.AddPair(Attn(1, "q_proj"), 3, 4, 4);
  // layer 0 q: second key -> r 1; alpha 4 -> scaling 4.
  auto q0 = d.AddPair(Attn(0, "q_proj"), 1, 4, 4);
  // "_proj" must follow a '.', so it matches nothing: k keeps r 2, alpha 4 (scaling 2).
  auto k0 = d.AddPair(Attn(0, "k_proj"), 2, 4, 2);
  // up: regex alpha key -> alpha 1, r 2 -> scaling 0.5.
  auto up1 = d.AddPair(Mlp(1, "up_proj"), 2, 4, 6);
  LoraSpec spec = TinySpec();
  Expected<PackedLora> r = LoadPeftAdapter("pat", d.Write(tmp), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->modules, (std::vector<std::string>{"q_proj", "k_proj", "up_proj"}));
  ExpectSlot(*r, spec, Attn(1, "q_proj"), q1, 2.0f, 3);
  ExpectSlot(*r, spec, Attn(0, "q_proj"), q0, 4.0f, 1);
  ExpectSlot(*r, spec, Attn(0, "k_proj"), k0, 2.0f, 2);
  ExpectSlot(*r, spec, Mlp(1, "up_proj"), up1, 0.5f, 2);
}

TEST(PeftAdapterTest, InexactScalingIsAlphaOverRInFloat) {
  TempDir tmp;
  AdapterDir d;
  d.config["r"] = 3;
  d.config["lora_alpha"] = 1.0;
  auto o0 = d.AddPair(Attn(0, "o_proj"), 3, 4, 4);
  LoraSpec spec = TinySpec();
  Expected<PackedLora> r = LoadPeftAdapter("third", d.Write(tmp), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int64_t t = TargetOf(spec, Attn(0, "o_proj"));
  for (int64_t o = 0; o < 4; ++o) {
    for (int64_t k = 0; k < 3; ++k) {
      EXPECT_FLOAT_EQ(r->bt[t][k * 4 + o], o0.second[o * 3 + k] / 3.0f);
    }
    EXPECT_EQ(r->bt[t][3 * 4 + o], 0.0f);  // padding row
  }
}

TEST(PeftAdapterTest, HalfAndBFloat16ConvertExactly) {
  TempDir tmp;
  AdapterDir d;
  auto g = d.AddPair(Mlp(0, "gate_proj"), 2, 4, 6, "F16");
  auto v = d.AddPair(Attn(1, "v_proj"), 2, 4, 2, "BF16", -0.5f);
  LoraSpec spec = TinySpec();
  Expected<PackedLora> r = LoadPeftAdapter("half", d.Write(tmp), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSlot(*r, spec, Mlp(0, "gate_proj"), g, 2.0f, 2);
  ExpectSlot(*r, spec, Attn(1, "v_proj"), v, 2.0f, 2);
}

TEST(PeftAdapterTest, LlavaLayoutsAndUnprefixedNamesMapToTheDecoderTargets) {
  LoraSpec spec = TinySpec();
  const std::vector<std::string> prefixes = {"model.language_model.layers.1",
                                             "language_model.model.layers.1"};
  for (const std::string& prefix : prefixes) {
    TempDir tmp;
    AdapterDir d;
    // rank_pattern is matched against the module's own name, as PEFT does.
    d.config["rank_pattern"] = {{prefix + ".self_attn.q_proj", 1}};
    auto q = d.AddPair(prefix + ".self_attn.q_proj", 1, 4, 4);
    auto up = d.AddPair(prefix + ".mlp.up_proj", 2, 4, 6);
    Expected<PackedLora> r = LoadPeftAdapter("llava", d.Write(tmp), spec);
    ASSERT_TRUE(r.ok()) << prefix << ": " << r.status().ToString();
    ExpectSlot(*r, spec, Attn(1, "q_proj"), q, 4.0f, 1);
    ExpectSlot(*r, spec, Mlp(1, "up_proj"), up, 2.0f, 2);
  }
  // Without the "base_model.model." prefix (vLLM accepts these too).
  TempDir tmp;
  AdapterDir d;
  Pair q = {Ramp(2 * 4, 0.0f), Ramp(4 * 2, 1.0f)};
  d.Add(Attn(0, "q_proj") + ".lora_A.weight", {2, 4}, q.first);
  d.Add(Attn(0, "q_proj") + ".lora_B.weight", {4, 2}, q.second);
  Expected<PackedLora> r = LoadPeftAdapter("bare", d.Write(tmp), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSlot(*r, spec, Attn(0, "q_proj"), q, 2.0f, 2);
}

TEST(PeftAdapterTest, PackedLayoutRoundTripsThroughTheView) {
  TempDir tmp;
  AdapterDir d;
  auto k1 = d.AddPair(Attn(1, "k_proj"), 2, 4, 2);
  LoraSpec spec = TinySpec({"q_proj", "k_proj"});
  // Per layer: q 4*(4+4) + k 4*(4+2) = 56 floats; 2 layers.
  EXPECT_EQ(PackedLoraFloats(spec), 112);
  Expected<PackedLora> r = LoadPeftAdapter("k", d.Write(tmp), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<float> packed(112, -7.0f);
  WritePackedLora(*r, spec, packed.data());
  // Target 3 (layer 1 k) starts after 56 + 32 floats: A (16 floats) then Bᵀ (8).
  std::vector<float> want(112, 0.0f);
  std::vector<float> a = PaddedA(k1.first, 4, 4), bt = PaddedBt(k1.second, 2.0f, 2, 2, 4);
  std::copy(a.begin(), a.end(), want.begin() + 88);
  std::copy(bt.begin(), bt.end(), want.begin() + 104);
  EXPECT_EQ(packed, want);

  Expected<PackedLoraView> view = PackedLoraView::Make(packed.data(), 112, spec);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->num_targets(), 4);
  EXPECT_EQ(view->a(3), packed.data() + 88);
  EXPECT_EQ(view->bt(3), packed.data() + 104);
  EXPECT_EQ(view->a(1), packed.data() + 32);
  EXPECT_EQ(view->bt(1), packed.data() + 48);
  Expected<PackedLoraView> bad = PackedLoraView::Make(packed.data(), 111, spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("has 111 floats, but the artifact's LoRA targets need 112"));
}

// ---- Errors ----

TEST(PeftAdapterErrorTest, MissingDirectoryAndFiles) {
  TempDir tmp;
  LoraSpec spec = TinySpec();
  EXPECT_THAT(ErrorOf(LoadPeftAdapter("x", tmp.File("nope"), spec)),
              HasSubstr("LoRA adapter 'x' (" + tmp.File("nope") + "): not a directory"));

  std::string dir = tmp.File("empty");
  mkdir(dir.c_str(), 0755);
  std::string msg = ErrorOf(LoadPeftAdapter("x", dir, spec));
  EXPECT_THAT(msg, HasSubstr("2 problems"));
  EXPECT_THAT(msg, HasSubstr("adapter_config.json is missing"));
  EXPECT_THAT(msg, HasSubstr("adapter_model.safetensors is missing"));

  AdapterDir d;
  d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  std::string bin = d.Write(tmp, "bin");
  unlink((bin + "/adapter_model.safetensors").c_str());
  WriteFile(bin + "/adapter_model.bin", "PK\x03\x04 pickle");
  msg = ErrorOf(LoadPeftAdapter("x", bin, spec));
  EXPECT_THAT(msg, HasSubstr("adapter_model.bin is a pickle checkpoint"));
  EXPECT_THAT(msg, HasSubstr("convert it to safetensors"));
}

TEST(PeftAdapterErrorTest, MalformedConfig) {
  TempDir tmp;
  LoraSpec spec = TinySpec();
  AdapterDir d;
  d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  std::string dir = d.Write(tmp);
  WriteFile(dir + "/adapter_config.json", "{\"r\": 2,");
  EXPECT_THAT(ErrorOf(LoadPeftAdapter("x", dir, spec)),
              HasSubstr("adapter_config.json: not a JSON object"));

  AdapterDir e;
  e.config["peft_type"] = "IA3";
  e.config.erase("r");
  e.config["lora_alpha"] = "big";
  e.config["use_rslora"] = 1;
  e.config["rank_pattern"] = {{"q_proj", 0}, {"(", 2}};
  e.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  std::string msg = ErrorOf(LoadPeftAdapter("x", e.Write(tmp, "e"), spec));
  EXPECT_THAT(msg, HasSubstr("6 problems"));
  EXPECT_THAT(msg, HasSubstr("peft_type is \"IA3\": only LORA adapters are supported"));
  EXPECT_THAT(msg, HasSubstr("field 'r' is missing"));
  EXPECT_THAT(msg, HasSubstr("field 'lora_alpha' must be a number, got \"big\""));
  EXPECT_THAT(msg, HasSubstr("field 'use_rslora' must be a boolean, got 1"));
  EXPECT_THAT(msg, HasSubstr("rank_pattern['q_proj'] must be a positive integer, got 0"));
  EXPECT_THAT(msg, HasSubstr("rank_pattern key '(' is not a valid regular expression"));
}

TEST(PeftAdapterErrorTest, UnsupportedConfigFeatures) {
  struct Case {
    const char* field;
    Json value;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"use_dora", true, "use_dora is true: DoRA is not supported"},
      {"modules_to_save", Json::array({"lm_head"}),
       "modules_to_save is [\"lm_head\"]: only modules_to_save null"},
      {"bias", "lora_only", "bias is \"lora_only\": adapter bias is not supported"},
      {"lora_bias", true, "lora_bias is true"},
      {"fan_in_fan_out", true, "fan_in_fan_out is true"},
      {"alora_invocation_tokens", Json::array({1, 2}),
       "alora_invocation_tokens is [1,2]: activated LoRA (aLoRA) is not supported"},
      {"layer_replication", Json::array({Json::array({0, 2})}),
       "layer_replication is [[0,2]]: layer replication is not supported"},
      {"use_qalora", true, "use_qalora is true: QALoRA is not supported"},
  };
  LoraSpec spec = TinySpec();
  for (const Case& c : cases) {
    TempDir tmp;
    AdapterDir d;
    d.config[c.field] = c.value;
    d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
    EXPECT_THAT(ErrorOf(LoadPeftAdapter("x", d.Write(tmp), spec)),
                HasSubstr(std::string("adapter_config.json: ") + c.message))
        << c.field;
  }
  // Their "off" values are accepted.
  TempDir tmp;
  AdapterDir d;
  d.config["modules_to_save"] = Json::array();
  d.config["alora_invocation_tokens"] = nullptr;
  d.config["lora_bias"] = false;
  d.config["target_modules"] = "all-linear";
  d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  EXPECT_TRUE(LoadPeftAdapter("x", d.Write(tmp), spec).ok());
}

TEST(PeftAdapterErrorTest, RankAboveMaxLoraRank) {
  TempDir tmp;
  AdapterDir d;
  d.config["r"] = 8;
  d.AddPair(Attn(0, "q_proj"), 8, 4, 4);
  d.AddPair(Attn(1, "q_proj"), 8, 4, 4);
  EXPECT_EQ(ErrorOf(LoadPeftAdapter("big", d.Write(tmp), TinySpec())),
            "LoRA adapter 'big' (" + tmp.File("adapter") +
                "): LoRA rank 8 (model.layers.0.self_attn.q_proj) is greater than max_lora_rank 4 "
                "(the artifact's --max-lora-rank) (and 1 more like it)");
}

TEST(PeftAdapterErrorTest, ModuleTheArtifactWasNotCompiledFor) {
  TempDir tmp;
  AdapterDir d;
  d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  d.AddPair(Attn(0, "k_proj"), 2, 4, 2);
  d.AddPair(Attn(1, "k_proj"), 2, 4, 2);
  std::string msg = ErrorOf(LoadPeftAdapter("k", d.Write(tmp), TinySpec({"q_proj", "v_proj"})));
  EXPECT_THAT(msg,
              HasSubstr("the adapter adapts k_proj (model.layers.0.self_attn.k_proj), but the "
                        "artifact was compiled with --lora-target-modules q_proj,v_proj (and 1 "
                        "more like it)"));
}

TEST(PeftAdapterErrorTest, ModulesOutsideTheDecoderProjections) {
  TempDir tmp;
  AdapterDir d;
  d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  d.AddPair("model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj", 2, 8, 8);
  d.AddPair("model.vision_tower.vision_model.encoder.layers.1.self_attn.q_proj", 2, 8, 8);
  d.AddPair("model.multi_modal_projector.linear_1", 2, 8, 4);
  d.AddPair("lm_head", 2, 4, 10);
  d.Add("base_model.model.model.embed_tokens.lora_embedding_A", {2, 10}, Ramp(20, 0));
  d.Add("base_model.model.model.embed_tokens.lora_embedding_B", {4, 2}, Ramp(8, 0));
  d.AddPair("model.layers.0.self_attn.rotary", 2, 4, 4);
  std::string msg = ErrorOf(LoadPeftAdapter("vis", d.Write(tmp), TinySpec()));
  const std::string tail =
      " is not supported: the artifact has LoRA on the decoder's q/k/v/o/gate/up/down only";
  EXPECT_THAT(msg, HasSubstr("5 problems"));
  EXPECT_THAT(msg, HasSubstr("LoRA on the vision tower "
                             "(model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj)" +
                             tail + " (and 1 more like it)"));
  EXPECT_THAT(
      msg,
      HasSubstr("LoRA on the multi-modal projector (model.multi_modal_projector.linear_1)" + tail));
  EXPECT_THAT(msg, HasSubstr("LoRA on lm_head (lm_head)" + tail));
  EXPECT_THAT(msg, HasSubstr("LoRA on embed_tokens (model.embed_tokens)" + tail));
  EXPECT_THAT(msg, HasSubstr("(model.layers.0.self_attn.rotary)" + tail));
}

TEST(PeftAdapterErrorTest, BiasDoraAndNonLoraTensors) {
  TempDir tmp;
  AdapterDir d;
  d.AddPair(Attn(0, "q_proj"), 2, 4, 4);
  d.Add("base_model.model." + Attn(0, "q_proj") + ".lora_B.bias", {4}, Ramp(4, 0));
  d.Add("base_model.model." + Attn(0, "q_proj") + ".lora_magnitude_vector", {4}, Ramp(4, 0));
  d.Add("base_model.model.lm_head.weight", {10, 4}, Ramp(40, 0));
  d.Add("base_model.model." + Attn(0, "k_proj") + ".lora_A.default.weight", {2, 4}, Ramp(8, 0));
  std::string msg = ErrorOf(LoadPeftAdapter("b", d.Write(tmp), TinySpec()));
  EXPECT_THAT(msg, HasSubstr("3 problems"));
  EXPECT_THAT(msg,
              HasSubstr("tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias' "
                        "is a bias: adapter bias is not supported"));
  EXPECT_THAT(msg, HasSubstr("lora_magnitude_vector' is a DoRA magnitude vector"));
  EXPECT_THAT(msg, HasSubstr("tensor 'base_model.model.lm_head.weight' is not a LoRA weight"));
  EXPECT_THAT(msg, HasSubstr("(and 1 more like it)"));  // lora_A.default.weight
}

TEST(PeftAdapterErrorTest, ShapesOfAnotherBaseModelAreNamedWithTheExpectedShape) {
  TempDir tmp;
  AdapterDir d;
  d.AddPair(Attn(0, "q_proj"), 2, 8, 4);  // in 8, the model's q has in 4
  d.AddPair(Attn(1, "q_proj"), 2, 8, 4);
  d.AddPair(Mlp(0, "down_proj"), 2, 6, 5);  // out 5, expected 4
  std::string msg = ErrorOf(LoadPeftAdapter("other", d.Write(tmp), TinySpec()));
  EXPECT_THAT(msg, HasSubstr("2 problems"));
  EXPECT_THAT(msg,
              HasSubstr("tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' "
                        "has shape [2, 8], expected [2, 4] (model.layers.0.self_attn.q_proj has "
                        "in_features 4): the adapter was trained on a different base model (and "
                        "1 more like it)"));
  EXPECT_THAT(msg,
              HasSubstr("tensor 'base_model.model.model.layers.0.mlp.down_proj.lora_B.weight' has "
                        "shape [5, 2], expected [4, 2] (model.layers.0.mlp.down_proj has "
                        "out_features 4)"));
}

TEST(PeftAdapterErrorTest, RankDisagreements) {
  TempDir tmp;
  AdapterDir d;  // r 2
  d.AddPair(Attn(0, "q_proj"), 3, 4, 4);
  d.Add("base_model.model." + Attn(1, "q_proj") + ".lora_A.weight", {2, 4}, Ramp(8, 0));
  d.Add("base_model.model." + Attn(1, "q_proj") + ".lora_B.weight", {4, 1}, Ramp(4, 0));
  d.Add("base_model.model." + Attn(1, "k_proj") + ".lora_A.weight", {2, 4, 1}, Ramp(8, 0));
  d.Add("base_model.model." + Attn(1, "k_proj") + ".lora_B.weight", {2, 2}, Ramp(4, 0));
  std::string msg = ErrorOf(LoadPeftAdapter("rk", d.Write(tmp), TinySpec()));
  EXPECT_THAT(msg, HasSubstr("3 problems"));
  EXPECT_THAT(msg,
              HasSubstr("tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' "
                        "has rank 3, but adapter_config.json gives r = 2 for "
                        "model.layers.0.self_attn.q_proj (from r)"));
  EXPECT_THAT(msg, HasSubstr("disagree on the rank (2 rows of lora_A, 1 columns of lora_B)"));
  EXPECT_THAT(msg, HasSubstr("k_proj.lora_A.weight' has shape [2, 4, 1]: a LoRA weight is 2-D"));
}

TEST(PeftAdapterErrorTest, LayerBeyondTheModelUnpairedAndDtype) {
  TempDir tmp;
  AdapterDir d;
  d.AddPair("model.layers.7.self_attn.q_proj", 2, 4, 4);
  d.Add("base_model.model." + Attn(0, "v_proj") + ".lora_A.weight", {2, 4}, Ramp(8, 0));
  d.Add("base_model.model." + Mlp(1, "up_proj") + ".lora_B.weight", {6, 2}, Ramp(12, 0));
  d.AddPair(Attn(1, "o_proj"), 2, 4, 4);
  d.weights.Add("base_model.model." + Attn(0, "o_proj") + ".lora_A.weight", "I32", {2, 4},
                xcc::testing::Bytes(std::vector<int32_t>(8, 1)));
  d.AddPair(Attn(0, "o_proj") + "x", 2, 4, 4);  // not a module name PEFT writes
  std::string msg = ErrorOf(LoadPeftAdapter("l", d.Write(tmp), TinySpec()));
  EXPECT_THAT(msg,
              HasSubstr("tensor 'base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight': "
                        "layer 7 is beyond the model's 2 layers"));
  EXPECT_THAT(msg,
              HasSubstr("tensor 'base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight' "
                        "has no matching lora_B tensor"));
  EXPECT_THAT(msg,
              HasSubstr("tensor 'base_model.model.model.layers.1.mlp.up_proj.lora_B.weight' has "
                        "no matching lora_A tensor"));
  EXPECT_THAT(msg, HasSubstr("o_proj.lora_A.weight': dtype I32 is not supported (f32, f16, bf16)"));
  EXPECT_THAT(msg, HasSubstr("(model.layers.0.self_attn.o_projx) is not supported"));
  EXPECT_THAT(msg, Not(HasSubstr("layers.1.self_attn.o_proj")));
}

TEST(PeftAdapterErrorTest, EmptyAdapter) {
  TempDir tmp;
  AdapterDir d;
  EXPECT_THAT(ErrorOf(LoadPeftAdapter("e", d.Write(tmp), TinySpec())),
              HasSubstr("adapter_model.safetensors has no LoRA weights"));
}

TEST(PeftAdapterErrorTest, OneMessageListsEveryProblem) {
  TempDir tmp;
  AdapterDir d;
  d.config["r"] = 8;
  d.config["use_dora"] = true;
  d.config["modules_to_save"] = Json::array({"lm_head"});
  d.config["bias"] = "all";
  d.AddPair(Attn(0, "q_proj"), 8, 4, 4);                  // rank 8 > 4
  d.AddPair(Attn(0, "k_proj"), 8, 4, 2);                  // not compiled (+ rank)
  d.AddPair(Attn(1, "v_proj"), 8, 5, 2);                  // wrong in_features (+ rank)
  d.AddPair("model.vision_tower.blocks.0.qkv", 8, 3, 9);  // vision tower
  Expected<PackedLora> r = LoadPeftAdapter("mess", d.Write(tmp), TinySpec({"q_proj", "v_proj"}));
  std::string msg = ErrorOf(r);
  EXPECT_THAT(msg,
              HasSubstr("LoRA adapter 'mess' (" + tmp.File("adapter") + "): 7 problems: (1) "));
  EXPECT_THAT(msg, HasSubstr("; (7) "));
  EXPECT_THAT(msg, HasSubstr("modules_to_save is [\"lm_head\"]"));
  EXPECT_THAT(msg, HasSubstr("DoRA is not supported"));
  EXPECT_THAT(msg, HasSubstr("bias is \"all\""));
  EXPECT_THAT(msg,
              HasSubstr("LoRA rank 8 (model.layers.0.self_attn.q_proj) is greater than "
                        "max_lora_rank 4 (the artifact's --max-lora-rank) (and 1 more like it)"));
  EXPECT_THAT(msg, HasSubstr("adapts k_proj"));
  EXPECT_THAT(msg, HasSubstr("v_proj.lora_A.weight' has shape [8, 5], expected [8, 4]"));
  EXPECT_THAT(msg, HasSubstr("LoRA on the vision tower (model.vision_tower.blocks.0.qkv)"));
}

}  // namespace
}  // namespace xrt
