#include "compiler/frontend/hf_model_source.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/frontend/decoder_tensors.h"
#include "compiler/frontend/hf_config.h"
#include "compiler/frontend/test_util.h"

namespace xcc {
namespace {

using json = nlohmann::json;
using testing::DescribeDecoderConfig;
using testing::SafetensorsWriter;
using testing::TempDir;
using testing::WriteFile;

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// A tiny Llama: D=8, 2 heads of 4, 1 kv head, F=4, V=6, 1 layer.
json TinyConfig() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 6},
          {"hidden_size", 8},
          {"intermediate_size", 4},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 100000.0},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", true},
          {"eos_token_id", 4},
          {"bos_token_id", 5}};
}

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// All tensors of TinyConfig (attention_bias adds q/k/v biases).
void AddTinyTensors(SafetensorsWriter* w, bool bias = false, bool lm_head = false) {
  w->AddF32("model.embed_tokens.weight", {6, 8}, Iota(48, 0));
  w->AddF32("model.layers.0.input_layernorm.weight", {8}, Iota(8, 1));
  w->AddF32("model.layers.0.self_attn.q_proj.weight", {8, 8}, Iota(64, 100));
  w->AddF32("model.layers.0.self_attn.k_proj.weight", {4, 8}, Iota(32, 200));
  w->AddF32("model.layers.0.self_attn.v_proj.weight", {4, 8}, Iota(32, 300));
  if (bias) {
    w->AddF32("model.layers.0.self_attn.q_proj.bias", {8}, Iota(8, 0));
    w->AddF32("model.layers.0.self_attn.k_proj.bias", {4}, Iota(4, 0));
    w->AddF32("model.layers.0.self_attn.v_proj.bias", {4}, Iota(4, 0));
  }
  w->AddF32("model.layers.0.self_attn.o_proj.weight", {8, 8}, Iota(64, 400));
  w->AddF32("model.layers.0.post_attention_layernorm.weight", {8}, Iota(8, 1));
  w->AddF32("model.layers.0.mlp.gate_proj.weight", {4, 8}, Iota(32, 500));
  w->AddF32("model.layers.0.mlp.up_proj.weight", {4, 8}, Iota(32, 600));
  w->AddF32("model.layers.0.mlp.down_proj.weight", {8, 4}, Iota(32, 700));
  w->AddF32("model.norm.weight", {8}, Iota(8, 1));
  if (lm_head) w->AddF32("lm_head.weight", {6, 8}, Iota(48, 800));
}

const char* kTokenizerJson = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 4, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
     "rstrip": false, "normalized": false, "special": true},
    {"id": 5, "content": "<|im_start|>", "single_word": false, "lstrip": false,
     "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                    "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
              "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false,
            "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "<|endoftext|>": 4, "<|im_start|>": 5},
            "merges": ["a b"]}
})";

// Writes a complete tiny model directory.
void WriteTinyModel(const TempDir& dir, const json& config = TinyConfig()) {
  WriteFile(dir.File("config.json"), config.dump());
  WriteFile(dir.File("tokenizer.json"), kTokenizerJson);
  json tc = {{"bos_token", "<|im_start|>"},
             {"eos_token", "<|endoftext|>"},
             {"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}};
  WriteFile(dir.File("tokenizer_config.json"), tc.dump());
  WriteFile(dir.File("generation_config.json"), json({{"eos_token_id", {4, 5}},
                                                      {"temperature", 0.7},
                                                      {"top_p", 0.9},
                                                      {"top_k", 20},
                                                      {"repetition_penalty", 1.05}})
                                                    .dump());
  SafetensorsWriter w;
  AddTinyTensors(&w);
  WriteFile(dir.File("model.safetensors"), w.Build());
}

TEST(HfModelSourceTest, OpensTinyModel) {
  TempDir dir;
  WriteTinyModel(dir);
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const ModelSource& m = **src;
  EXPECT_EQ(DescribeDecoderConfig(m.config()),
            "LlamaForCausalLM vocab 6 hidden 8 intermediate 4 layers 1 heads 2 kv_heads 1 "
            "head_dim 4 max_pos 64 rms_eps 1e-05 rope_theta 100000 rope_scaling none x1 tied yes "
            "qkv_bias no o_bias no act silu sliding_window 0");

  EXPECT_EQ(m.generation().eos_token_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_DOUBLE_EQ(m.generation().temperature, 0.7);
  EXPECT_DOUBLE_EQ(m.generation().top_p, 0.9);
  EXPECT_EQ(m.generation().top_k, 20);
  EXPECT_DOUBLE_EQ(m.generation().repetition_penalty, 1.05);
  EXPECT_EQ(m.chat_template(), "{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(m.tokenizer().vocab.size(), 6u);

  std::vector<std::string> files = m.input_files();
  EXPECT_EQ(files,
            (std::vector<std::string>{dir.File("config.json"), dir.File("generation_config.json"),
                                      dir.File("model.safetensors"), dir.File("tokenizer.json"),
                                      dir.File("tokenizer_config.json")}));
  std::vector<std::string> names = m.tensor_names();
  EXPECT_EQ(names.size(), 11u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));

  Expected<std::vector<float>> k = m.ReadF32("model.layers.0.self_attn.k_proj.weight");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(*k, Iota(32, 200));
  Expected<const SourceTensor*> t = m.tensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ((*t)->dtype, SourceDType::kF32);
  Expected<const SourceTensor*> missing = m.tensor("lm_head.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), xrt::StatusCode::kNotFound);
  EXPECT_FALSE(m.ReadF32("nope").ok());
  EXPECT_TRUE(ValidateDecoderTensors(m).ok());
}

TEST(HfModelSourceTest, ShardedWithIndex) {
  TempDir dir;
  WriteTinyModel(dir);
  unlink(dir.File("model.safetensors").c_str());
  SafetensorsWriter all;
  AddTinyTensors(&all);
  SafetensorsWriter s1, s2;
  json weight_map = json::object();
  int i = 0;
  for (auto it = all.header().begin(); it != all.header().end(); ++it, ++i) {
    const json& e = it.value();
    size_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    SafetensorsWriter& s = (i % 2) ? s1 : s2;
    s.Add(it.key(), "F32", e["shape"].get<std::vector<int64_t>>(), all.data().substr(b, end - b));
    weight_map[it.key()] =
        (i % 2) ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  WriteFile(dir.File("model-00001-of-00002.safetensors"), s1.Build());
  WriteFile(dir.File("model-00002-of-00002.safetensors"), s2.Build());
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  WriteFile(dir.File("model.safetensors.index.json"), index.dump());

  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path() + "/");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ((*src)->tensor_names().size(), 11u);
  Expected<std::vector<float>> v = (*src)->ReadF32("model.layers.0.mlp.up_proj.weight");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, Iota(32, 600));
  std::vector<std::string> files = (*src)->input_files();
  EXPECT_TRUE(std::count(files.begin(), files.end(), dir.File("model-00002-of-00002.safetensors")));
  EXPECT_TRUE(std::count(files.begin(), files.end(), dir.File("model.safetensors.index.json")));

  // An index entry whose shard does not hold the tensor.
  weight_map["model.norm.weight"] =
      weight_map["model.norm.weight"] == "model-00001-of-00002.safetensors"
          ? "model-00002-of-00002.safetensors"
          : "model-00001-of-00002.safetensors";
  index["weight_map"] = weight_map;
  WriteFile(dir.File("model.safetensors.index.json"), index.dump());
  src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(
      Contains(src.status().message(), "model.safetensors.index.json: tensor 'model.norm.weight'"))
      << src.status().message();

  // A shard that is missing.
  weight_map["model.norm.weight"] = "model-00003-of-00002.safetensors";
  index["weight_map"] = weight_map;
  WriteFile(dir.File("model.safetensors.index.json"), index.dump());
  src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "model-00003-of-00002.safetensors"))
      << src.status().message();
}

TEST(HfModelSourceTest, WrongTensorShapeNamesTensor) {
  TempDir dir;
  WriteTinyModel(dir);
  SafetensorsWriter w;
  AddTinyTensors(&w);
  w.header()["model.layers.0.self_attn.k_proj.weight"]["shape"] = {8, 4};
  WriteFile(dir.File("model.safetensors"), w.Build());
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "tensor 'model.layers.0.self_attn.k_proj.weight'"))
      << src.status().message();
  EXPECT_TRUE(Contains(src.status().message(), "shape [8, 4], expected [4, 8]"))
      << src.status().message();
}

TEST(HfModelSourceTest, MissingLmHeadWhenUntied) {
  TempDir dir;
  json c = TinyConfig();
  c["tie_word_embeddings"] = false;
  WriteTinyModel(dir, c);
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "tensor 'lm_head.weight': missing"))
      << src.status().message();

  SafetensorsWriter w;
  AddTinyTensors(&w, /*bias=*/false, /*lm_head=*/true);
  WriteFile(dir.File("model.safetensors"), w.Build());
  src = ModelSource::Open(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_FALSE((*src)->config().tie_word_embeddings);
}

// Writes `w` as the directory's model.safetensors and opens the model; returns
// the error ("" and a test failure if it opened).
std::string OpenWithWeights(const TempDir& dir, const SafetensorsWriter& w,
                            xrt::StatusCode want = xrt::StatusCode::kInvalidArgument) {
  WriteFile(dir.File("model.safetensors"), w.Build());
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  if (src.ok()) {
    ADD_FAILURE() << "opened, expected an error";
    return "";
  }
  EXPECT_EQ(src.status().code(), want) << src.status().ToString();
  return src.status().message();
}

// A tensor the decoder graph would not read is an error naming it, except
// what transformers itself skips (rotary_emb.inv_freq of older checkpoints).
TEST(HfModelSourceTest, UnusedTensorIsAnErrorNamingIt) {
  TempDir dir;
  WriteTinyModel(dir);
  SafetensorsWriter w;
  AddTinyTensors(&w);
  w.AddF32("model.layers.0.self_attn.rotary_emb.inv_freq", {2}, {1.0f, 0.01f});
  WriteFile(dir.File("model.safetensors"), w.Build());
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();

  w.AddF32("model.layers.0.mlp.gate_proj.bias", {4}, Iota(4, 0));
  std::string error = OpenWithWeights(dir, w);
  EXPECT_TRUE(Contains(
      error, "'model.layers.0.mlp.gate_proj.bias' (" + dir.File("model.safetensors") + ")"))
      << error;
  EXPECT_TRUE(Contains(error, "does not use")) << error;

  // q/k/v biases without attention_bias in config.json.
  SafetensorsWriter biased;
  AddTinyTensors(&biased, /*bias=*/true);
  error = OpenWithWeights(dir, biased);
  EXPECT_TRUE(Contains(error, "'model.layers.0.self_attn.q_proj.bias'")) << error;
}

// Llama attention_bias: q, k, v and o_proj all have biases (LlamaAttention).
TEST(HfModelSourceTest, LlamaAttentionBiasIncludesOProj) {
  TempDir dir;
  json config = TinyConfig();
  config["attention_bias"] = true;
  WriteTinyModel(dir, config);
  SafetensorsWriter w;
  AddTinyTensors(&w, /*bias=*/true);
  std::string error = OpenWithWeights(dir, w, xrt::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(error, "tensor 'model.layers.0.self_attn.o_proj.bias': missing")) << error;

  w.AddF32("model.layers.0.self_attn.o_proj.bias", {8}, Iota(8, 0));
  WriteFile(dir.File("model.safetensors"), w.Build());
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_TRUE((*src)->config().attention_output_bias);
  EXPECT_TRUE((*src)->tensor("model.layers.0.self_attn.o_proj.bias").ok());
}

TEST(HfModelSourceTest, Qwen2NeedsBiases) {
  TempDir dir;
  json c = TinyConfig();
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["use_sliding_window"] = false;
  c["sliding_window"] = 32;
  WriteTinyModel(dir, c);
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "self_attn.q_proj.bias")) << src.status().message();
  SafetensorsWriter w;
  AddTinyTensors(&w, /*bias=*/true);
  WriteFile(dir.File("model.safetensors"), w.Build());
  src = ModelSource::Open(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_TRUE((*src)->config().attention_bias);
  EXPECT_EQ((*src)->config().sliding_window, 0);
}

TEST(HfModelSourceTest, EosFromConfigAndTemplateFiles) {
  TempDir dir;
  WriteTinyModel(dir);
  WriteFile(dir.File("generation_config.json"), R"({"temperature": 0.5})");
  json tc = {
      {"chat_template",
       {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}};
  WriteFile(dir.File("tokenizer_config.json"), tc.dump());
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ((*src)->generation().eos_token_ids, (std::vector<int32_t>{4}));
  EXPECT_EQ((*src)->generation().top_k, -1);
  EXPECT_EQ((*src)->chat_template(), "D");

  WriteFile(dir.File("chat_template.jinja"), "J{{ x }}");
  src = ModelSource::Open(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ((*src)->chat_template(), "J{{ x }}");
}

TEST(HfModelSourceTest, MissingFiles) {
  TempDir dir;
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "config.json")) << src.status().message();

  WriteTinyModel(dir);
  unlink(dir.File("model.safetensors").c_str());
  src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "model.safetensors")) << src.status().message();

  WriteTinyModel(dir);
  unlink(dir.File("tokenizer.json").c_str());
  src = ModelSource::Open(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "tokenizer.json")) << src.status().message();

  src = ModelSource::Open(dir.File("does_not_exist"));
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), xrt::StatusCode::kNotFound);

  WriteFile(dir.File("notes.txt"), "hello");
  src = ModelSource::Open(dir.File("notes.txt"));
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "notes.txt")) << src.status().message();
}

// --- config.json parsing ---------------------------------------------------------

Status ConfigError(const json& j) {
  Expected<HfConfig> c = ParseHfConfig(j.dump(), "config.json");
  EXPECT_FALSE(c.ok());
  return c.ok() ? Status::Ok() : c.status();
}

TEST(HfConfigTest, UnknownArchitecture) {
  json j = TinyConfig();
  j["architectures"] = {"GPT2LMHeadModel"};
  Status s = ConfigError(j);
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(),
                       "config.json: field 'architectures': unsupported architecture "
                       "'GPT2LMHeadModel' (supported: LlamaForCausalLM, MistralForCausalLM, "
                       "Qwen2ForCausalLM)"))
      << s.message();
}

TEST(HfConfigTest, MissingAndMistypedFields) {
  for (const char* f : {"hidden_size", "vocab_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "max_position_embeddings", "architectures"}) {
    json j = TinyConfig();
    j.erase(f);
    Status s = ConfigError(j);
    EXPECT_TRUE(Contains(s.message(), fmt::format("config.json: field '{}': missing", f)))
        << s.message();
  }
  json j = TinyConfig();
  j["hidden_size"] = "eight";
  Status s = ConfigError(j);
  EXPECT_TRUE(
      Contains(s.message(), "config.json: field 'hidden_size': expected an integer, got string"))
      << s.message();
  j = TinyConfig();
  j["tie_word_embeddings"] = 1;
  EXPECT_TRUE(Contains(ConfigError(j).message(), "field 'tie_word_embeddings'"));
  j = TinyConfig();
  j["num_attention_heads"] = 0;
  EXPECT_TRUE(Contains(ConfigError(j).message(), "field 'num_attention_heads': must be positive"));
  j = TinyConfig();
  j["num_key_value_heads"] = 3;
  EXPECT_TRUE(Contains(ConfigError(j).message(), "field 'num_key_value_heads'"));
  j = TinyConfig();
  j["hidden_act"] = "gelu";
  s = ConfigError(j);
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(), "field 'hidden_act': unsupported value 'gelu'")) << s.message();
  EXPECT_EQ(ParseHfConfig("{not json", "config.json").status().code(), xrt::StatusCode::kDataLoss);
}

TEST(HfConfigTest, DefaultsAndExplicitHeadDim) {
  json j = TinyConfig();
  j.erase("num_key_value_heads");
  j.erase("rope_theta");
  j.erase("tie_word_embeddings");
  j.erase("rms_norm_eps");
  j["head_dim"] = 16;
  Expected<HfConfig> c = ParseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->decoder.num_key_value_heads, 2);
  EXPECT_EQ(c->decoder.head_dim, 16);
  EXPECT_DOUBLE_EQ(c->decoder.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->decoder.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c->decoder.tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{4}));

  j["attention_bias"] = true;
  j["eos_token_id"] = {1, 2};
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 4096;
  c = ParseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // transformers' MistralAttention has no biases whatever attention_bias says.
  EXPECT_FALSE(c->decoder.attention_bias);
  EXPECT_FALSE(c->decoder.attention_output_bias);
  EXPECT_EQ(c->decoder.sliding_window, 4096);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{1, 2}));
}

// LlamaAttention: attention_bias puts a bias on q, k, v and o; Qwen2Attention
// has q/k/v biases and none on o_proj.
TEST(HfConfigTest, AttentionBiasAsTransformersBuildsIt) {
  json j = TinyConfig();
  j["attention_bias"] = true;
  Expected<HfConfig> c = ParseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->decoder.attention_bias);
  EXPECT_TRUE(c->decoder.attention_output_bias);
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["attention_bias"] = false;
  c = ParseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->decoder.attention_bias);
  EXPECT_FALSE(c->decoder.attention_output_bias);
}

TEST(HfConfigTest, RopeScaling) {
  json j = TinyConfig();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  Expected<HfConfig> c = ParseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->decoder.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c->decoder.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c->decoder.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->decoder.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->decoder.rope_scaling.original_max_position_embeddings, 8192);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = ParseHfConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->decoder.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c->decoder.rope_scaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  Status s = ConfigError(j);
  EXPECT_TRUE(Contains(s.message(), "field 'rope_scaling.low_freq_factor': missing"))
      << s.message();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  s = ConfigError(j);
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(), "'yarn'")) << s.message();
}

TEST(GenerationConfigTest, Parses) {
  Expected<GenerationDefaults> g = ParseGenerationConfig(R"({"eos_token_id": 7})", "g.json");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->eos_token_ids, (std::vector<int32_t>{7}));
  EXPECT_LT(g->temperature, 0);
  g = ParseGenerationConfig(R"({"eos_token_id": [7, "x"]})", "g.json");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Contains(g.status().message(), "g.json: field 'eos_token_id'"));
  g = ParseGenerationConfig(R"({"top_k": 1.5})", "g.json");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Contains(g.status().message(), "field 'top_k'"));
}

}  // namespace
}  // namespace xcc
