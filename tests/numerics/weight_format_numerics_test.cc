// Low-precision weights end to end: an artifact compiled with --weight-dtype X
// must compute exactly what the f32 artifact of the same model computes once
// every weight X stores is replaced by the values X represents.
//
// For each format, the fixture llama_tied (tied embeddings: the lookup and the
// lm_head read one packed table; fused q/k/v and gate/up) is compiled twice:
//   quantized  the fixture itself, --weight-dtype X;
//   rounded    a copy whose linear weights and embedding table went through
//              X and back (xrt::PackWeightsFrom, then DequantizePackedRow),
//              --weight-dtype f32.
// The prompt logits and greedy continuations of the reference prompts must be
// bit-identical: the quantized kernels (prefill GEMM and decode GEMV paths),
// the packed embedding lookup and the packing agree with f32 on the same
// values. (Agreement with HF transformers on real quantized weights is
// smollm2_test's; the quantization itself against ggml's is
// runtime/kernels/weight_format_test's.)
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "compiler/frontend/model_source.h"
#include "compiler/frontend/source_dtype.h"
#include "compiler/frontend/test_util.h"
#include "runtime/executor/model_runner.h"
#include "runtime/kernels/test_util.h"
#include "runtime/kernels/weight_format.h"
#include "runtime/loader/artifact.h"
#include "schemas/artifact_generated.h"
#include "tests/numerics/fixture_io.h"
#include "tests/numerics/greedy.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixture = fs::path(XCC_SOURCE_DIR) / "tests/fixtures/models/llama_tied";

// The tensors --weight-dtype applies to: linear weights and the embedding table.
bool IsFormatted(const xcc::SourceTensor& t) {
  auto ends = [&](const std::string& s) {
    return t.name.size() >= s.size() && t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
  };
  return t.shape.size() == 2 &&
         (ends("proj.weight") || ends("embed_tokens.weight") || ends("lm_head.weight"));
}

// Writes a copy of the fixture whose formatted tensors hold the values `format`
// represents, as one f32 safetensors file.
void WriteRoundedCopy(xrt::WeightFormat format, const fs::path& out) {
  fs::create_directories(out);
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kFixture / f, out / f, fs::copy_options::overwrite_existing);
  auto source = xcc::ModelSource::Open(kFixture.string());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  xcc::testing::SafetensorsWriter st;
  int rounded = 0;
  for (const std::string& name : (*source)->tensor_names()) {
    auto t = (*source)->tensor(name);
    ASSERT_TRUE(t.ok());
    auto values = (*source)->ReadF32(name);
    ASSERT_TRUE(values.ok());
    if (IsFormatted(**t)) {
      const int64_t n = (*t)->shape[0], k = (*t)->shape[1];
      ASSERT_EQ(k % xrt::WeightFormatBlockSize(format), 0) << name;
      std::vector<uint8_t> packed(xrt::PackedWeightBytes(format, n, k));
      xrt::PackWeightsFrom(format, values->data(), n, k, packed.data());
      for (int64_t r = 0; r < n; ++r)
        xrt::DequantizePackedRow(format, packed.data(), n, k, r, values->data() + r * k);
      ++rounded;
    }
    st.AddF32(name, (*t)->shape, *values);
  }
  EXPECT_GT(rounded, 0);
  xcc::testing::WriteFile((out / "model.safetensors").string(), st.Build());
}

std::string CompileWith(const std::string& model, const std::string& weight_dtype,
                        const fs::path& out, const std::string& compute = "f32") {
  xcc::CompileOptions o;
  o.model_path = model;
  o.output_path = out.string();
  o.weight_dtype = weight_dtype;
  o.compute = compute;
  o.quiet = true;
  o.limits.max_num_seqs = 4;
  o.limits.max_model_len = 256;
  o.limits.max_num_batched_tokens = 64;
  o.token_buckets = {16, 64};
  auto s = xcc::Compile(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return out.string();
}

struct PromptRuns {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
};

PromptRuns RunPrompts(const std::string& artifact, const json& prompts) {
  PromptRuns run;
  auto engine = xcc::testing::OpenEngine(artifact);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return run;
  for (const json& p : prompts) {
    auto r = xcc::testing::Greedy(*engine->core, p["ids"].get<std::vector<int32_t>>(), 16);
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    run.logits.push_back(r.prompt_logits);
    run.tokens.push_back(r.tokens);
  }
  return run;
}

// (--weight-dtype, --compute): in bf16 compute, the rounded copy's f32
// weights are rounded to bf16 operands by the kernels, which are their values.
using FormatAndCompute = std::pair<const char*, const char*>;

// `prompts` ({"ids": [...]} each; the fixture's reference prompts by
// default) give bit-identical prompt logits and greedy continuations on the
// two artifacts.
void ExpectTheSameRuns(const std::string& artifact_a, const std::string& artifact_b,
                       const json& prompts = xcc::testing::ReadJson(kFixture /
                                                                    "reference.json")["prompts"]) {
  PromptRuns a = RunPrompts(artifact_a, prompts);
  PromptRuns b = RunPrompts(artifact_b, prompts);
  ASSERT_EQ(a.logits.size(), prompts.size());
  ASSERT_EQ(b.logits.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i].value("name", "prompt " + std::to_string(i)));
    ASSERT_EQ(a.logits[i].size(), b.logits[i].size());
    EXPECT_EQ(std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * 4), 0)
        << "prompt logits differ";
    EXPECT_EQ(a.tokens[i], b.tokens[i]) << "greedy continuation differs";
  }
}

class WeightFormatNumerics : public ::testing::TestWithParam<FormatAndCompute> {};

TEST_P(WeightFormatNumerics, BitIdenticalToF32OnTheRoundedWeights) {
  const std::string name = GetParam().first, compute = GetParam().second;
  xrt::WeightFormat format;
  ASSERT_TRUE(xrt::WeightFormatFromName(name, &format));
  const fs::path dir = fs::temp_directory_path() / ("xcc_weight_format_" + name + "_" + compute);
  fs::create_directories(dir);
  WriteRoundedCopy(format, dir / "rounded_model");
  const std::string quantized =
      CompileWith(kFixture.string(), name, dir / "quantized.xpk", compute);
  const std::string rounded =
      CompileWith((dir / "rounded_model").string(), "f32", dir / "rounded.xpk", compute);

  // The quantized artifact stores its linear weights and the (tied) table in
  // the format, once; the rounded one in f32. bf16 compute pairs the bf16
  // weights that only linears read (bf16_pairs, or bf16_pairs_amx for a host
  // with AMX-BF16); the table stays bf16.
  auto a = xrt::Artifact::Open(quantized);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const bool paired = format == xrt::WeightFormat::kBF16 && compute == "bf16";
  int in_format = 0, in_pairs = 0, tables = 0;
  for (uint32_t i = 0; i < (*a)->num_weights(); ++i) {
    auto weight = (*a)->weight(i);
    ASSERT_TRUE(weight.ok());
    const xpk::Weight* w = *weight;
    if (w->dtype() == static_cast<xpk::DType>(format)) ++in_format;
    if (w->dtype() == xpk::DType::bf16_pairs || w->dtype() == xpk::DType::bf16_pairs_amx)
      ++in_pairs;
    if (w->name()->str().find("embed_tokens") != std::string::npos) {
      ++tables;
      EXPECT_EQ(w->dtype(), static_cast<xpk::DType>(format)) << "the table";
    }
  }
  if (paired) {
    EXPECT_EQ(in_format, 1) << "the tied table";
    EXPECT_GE(in_pairs, 4) << "q/k/v, o, gate/up and down of each layer";
  } else {
    EXPECT_GE(in_format, 5) << "q/k/v, o, gate/up and down of each layer and the table";
    EXPECT_EQ(in_pairs, 0);
  }
  EXPECT_EQ(tables, 1) << "a tied table is stored once";

  ExpectTheSameRuns(quantized, rounded);
}

// --compute bf16 with --weight-dtype auto stores the fixture's f32 linear
// weights as bf16 pairs (their bf16 roundings, which the matmuls multiply),
// the lm_head's copy of the tied table too, the table itself in f32 for the
// lookup: bit-identical to --weight-dtype f32 in bf16 compute.
TEST(Bf16Compute, F32WeightsPairedAtCompileTimeGiveTheSameBits) {
  const fs::path dir = fs::temp_directory_path() / "xcc_weight_format_auto_compute_bf16";
  fs::create_directories(dir);
  const std::string paired = CompileWith(kFixture.string(), "auto", dir / "auto.xpk", "bf16");
  const std::string wide = CompileWith(kFixture.string(), "f32", dir / "f32.xpk", "bf16");
  auto a = xrt::Artifact::Open(paired);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  int pairs = 0;
  for (uint32_t i = 0; i < (*a)->num_weights(); ++i) {
    auto weight = (*a)->weight(i);
    ASSERT_TRUE(weight.ok());
    const xpk::Weight* w = *weight;
    if (w->dtype() == xpk::DType::bf16_pairs || w->dtype() == xpk::DType::bf16_pairs_amx) ++pairs;
    if (w->name()->str() == "model.embed_tokens.weight") {
      EXPECT_EQ(w->dtype(), xpk::DType::f32) << "the table keeps its values";
    }
    if (w->name()->str() == "model.embed_tokens.weight.packed32") {
      EXPECT_NE(w->dtype(), xpk::DType::f32) << "the lm_head's copy is paired";
    }
  }
  EXPECT_GE(pairs, 5) << "q/k/v, o, gate/up and down of each layer, the lm_head";
  EXPECT_LT(fs::file_size(paired), fs::file_size(wide));

  ExpectTheSameRuns(paired, wide);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, WeightFormatNumerics,
    ::testing::Values(FormatAndCompute{"f16", "f32"}, FormatAndCompute{"bf16", "f32"},
                      FormatAndCompute{"q8_0", "f32"}, FormatAndCompute{"q4_0", "f32"},
                      FormatAndCompute{"q4_1", "f32"}, FormatAndCompute{"q5_0", "f32"},
                      FormatAndCompute{"q5_1", "f32"}, FormatAndCompute{"bf16", "bf16"}),
    [](const auto& info) {
      return std::string(info.param.first) + (std::string(info.param.second) == "f32"
                                                  ? ""
                                                  : std::string("_compute_") + info.param.second);
    });

}  // namespace

namespace {

// Row-wise commands are marked to run only the step's real rows
// (Command.dynamic_rows): in lm_step every matmul and dispatch, not the
// attention (it finds the real tokens itself); in lm_logits all of them. That
// the real rows stay right with the padding rows skipped is what the numerics
// tests check (decode steps run one real row in a 16-row bucket).
TEST(DynamicRows, RowWiseCommandsOfTheBucketedExecutablesAreMarked) {
  const fs::path dir = fs::temp_directory_path() / "xcc_dynamic_rows";
  fs::create_directories(dir);
  const std::string path = CompileWith(kFixture.string(), "auto", dir / "a.xpk");
  auto a = xrt::Artifact::Open(path);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  int marked = 0, attention = 0;
  for (const xpk::Executable* e : *(*a)->manifest().executables()) {
    for (const xpk::Command* c : *e->commands()) {
      SCOPED_TRACE(e->name()->str() + " " + c->label()->str());
      if (c->kind() == xpk::CommandKind::ukernel && c->ukernel() == xpk::Ukernel::paged_attention) {
        EXPECT_FALSE(c->dynamic_rows());
        ++attention;
        continue;
      }
      EXPECT_TRUE(c->dynamic_rows());
      ++marked;
    }
  }
  EXPECT_GT(marked, 10);
  EXPECT_GT(attention, 0);
}

}  // namespace

namespace {

// Options for a small artifact of `model` (--weight-dtype auto, f32 compute).
xcc::CompileOptions SmallCompileOptions(const std::string& model, const fs::path& out) {
  xcc::CompileOptions o;
  o.model_path = model;
  o.output_path = out.string();
  o.quiet = true;
  o.limits.max_num_seqs = 2;
  o.limits.max_model_len = 64;
  o.limits.max_num_batched_tokens = 16;
  o.token_buckets = {16};
  return o;
}

// A GGUF's quantized tensors are kept as they are (--weight-dtype auto): every
// linear weight and the table (if tied, also the lm_head) in its own format,
// once, with exactly the GGUF's bytes per weight (the lossless repack keeps
// ggml's bits per weight; q3_k 114 bytes per ggml's 110, its 6-bit scales as
// int8; iq4_xs 146 per 136, its 6-bit scales as int8 per 16 rows). `kept`
// maps the GGUF's types to the artifact's dtypes; `table` is the table's.
// Their numerics against HF are decoder_numerics_test's. Returns the options
// it compiled with.
xcc::CompileOptions ExpectGgufTensorsKept(const std::string& fixture,
                                          const std::map<xcc::SourceDType, xpk::DType>& kept,
                                          xpk::DType table) {
  const fs::path gguf = fs::path(XCC_SOURCE_DIR) / "tests/fixtures/gguf" / fixture / "model.gguf";
  const fs::path dir = fs::temp_directory_path() / ("xcc_weight_format_" + fixture);
  fs::create_directories(dir);
  xcc::CompileOptions o = SmallCompileOptions(gguf.string(), dir / "auto.xpk");
  auto summary = xcc::Compile(o);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  if (!summary.ok()) return o;
  EXPECT_TRUE(summary->weight_notes.empty())
      << "nothing is dequantized: " << summary->weight_notes.front();

  auto source = xcc::ModelSource::Open(gguf.string());
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  if (!source.ok()) return o;
  std::map<xpk::DType, uint64_t> gguf_bytes;
  for (const std::string& name : (*source)->tensor_names()) {
    auto t = (*source)->tensor(name);
    EXPECT_TRUE(t.ok());
    if (t.ok() && kept.count((*t)->dtype)) gguf_bytes[kept.at((*t)->dtype)] += (*t)->nbytes;
  }
  auto a = xrt::Artifact::Open(o.output_path);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  if (!a.ok()) return o;
  std::map<xpk::DType, uint64_t> kept_bytes;
  int tables = 0;
  std::map<xpk::DType, int> by_dtype;
  for (uint32_t i = 0; i < (*a)->num_weights(); ++i) {
    const xpk::Weight* w = *(*a)->weight(i);
    ++by_dtype[w->dtype()];
    if (gguf_bytes.count(w->dtype())) {
      kept_bytes[w->dtype()] += w->size();
      EXPECT_EQ(w->layout(), xpk::WeightLayout::packed_panels) << w->name()->str();
    } else {
      EXPECT_EQ(w->shape()->size(), 1u)
          << w->name()->str() << " is " << xpk::EnumNameDType(w->dtype());  // norms, rope
    }
    if (w->name()->str().find("embed_tokens") != std::string::npos) {
      ++tables;
      EXPECT_EQ(w->dtype(), table);
    }
  }
  EXPECT_EQ(tables, 1) << "the table is stored once";
  for (const auto& [dtype, bytes] : gguf_bytes) {
    EXPECT_GT(by_dtype[dtype], 0) << xpk::EnumNameDType(dtype);
    const auto f = static_cast<xrt::WeightFormat>(dtype);
    const int64_t block = xrt::WeightFormatBlockSize(f);
    const uint64_t blocks = bytes / xrt::GgmlRowBytes(f, block);
    EXPECT_EQ(kept_bytes[dtype], blocks * xrt::PackedPanelBytes(f, block) / xrt::kPackNR)
        << xpk::EnumNameDType(dtype);
  }
  EXPECT_EQ(summary->weight_formats[xpk::EnumNameDType(table)].weights, by_dtype[table]);
  return o;
}

TEST(KQuants, AutoKeepsGgufKQuantTensors) {
  using xcc::SourceDType;
  xcc::CompileOptions o = ExpectGgufTensorsKept("kquants",
                                                {{SourceDType::kQ4_K, xpk::DType::q4_k},
                                                 {SourceDType::kQ5_K, xpk::DType::q5_k},
                                                 {SourceDType::kQ6_K, xpk::DType::q6_k}},
                                                xpk::DType::q6_k);

  // There is no quantizer to K-quants: asking for one is an error that says so.
  o.weight_dtype = "q4_k";
  auto rejected = xcc::Compile(o);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().ToString().find("quantizing to q4_k is not supported"),
            std::string::npos)
      << rejected.status().ToString();
}

}  // namespace

namespace {

// The packed embedding lookup and the matmuls on every K-quant, end to end:
// a tiny GGUF whose table, lm_head and linears are random K-quant blocks
// (hidden 256, one layer, a 6-token vocabulary) against the same GGUF with
// every tensor replaced by its F32 dequantization (weight_format.h's values,
// which weight_format_test checks against gguf-py). Prompt logits and greedy
// tokens must be bit-identical. Tied (the table is the lm_head) and untied.
struct KQuantModel {
  xrt::WeightFormat table, output;  // output: kF32 = tied
  xrt::WeightFormat attn, mlp;
  // Tensors (names after "blk.0.") written as ggml Q3_K instead (stored as
  // q3_k, format 1.16).
  std::set<std::string> q3k = {};
  // Tensors (full names without ".weight") written as random blocks of
  // another ggml type (IQ4_NL, IQ4_XS: f16 d first); their f32 copy is the
  // frontend's dequantization (convert_f32_test checks it against gguf-py).
  std::map<std::string, xcc::SourceDType> other = {};
};

uint32_t GgmlType(xrt::WeightFormat f) {
  switch (f) {
    case xrt::WeightFormat::kQ4_K:
      return xcc::testing::kTQ4_K;
    case xrt::WeightFormat::kQ5_K:
      return xcc::testing::kTQ5_K;
    case xrt::WeightFormat::kQ3_K:
      return xcc::testing::kTQ3_K;
    default:
      return xcc::testing::kTQ6_K;
  }
}

// Writes the quantized and the dequantized GGUF of `m`.
void WriteKQuantGgufs(const KQuantModel& m, const fs::path& quantized, const fs::path& f32) {
  using xcc::testing::GgufWriter;
  constexpr int64_t kD = 256, kHeads = 4, kKv = 2, kHd = 64, kVocab = 6;
  GgufWriter wq, wf;
  for (GgufWriter* w : {&wq, &wf}) {
    w->KvString("general.architecture", "llama");
    w->KvString("general.name", "kquant tables");
    w->KvU32("llama.embedding_length", kD);
    w->KvU32("llama.block_count", 1);
    w->KvU32("llama.feed_forward_length", kD);
    w->KvU32("llama.attention.head_count", kHeads);
    w->KvU32("llama.attention.head_count_kv", kKv);
    w->KvU32("llama.context_length", 512);
    w->KvU32("llama.rope.dimension_count", kHd);
    w->KvF32("llama.rope.freq_base", 10000.0f);
    w->KvF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w->KvString("tokenizer.ggml.model", "gpt2");
    w->KvString("tokenizer.ggml.pre", "smollm");
    w->KvStringArray("tokenizer.ggml.tokens",
                     {"a", "b", "ab", "<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    w->KvI32Array("tokenizer.ggml.token_type", {1, 1, 1, 3, 3, 3});
    w->KvStringArray("tokenizer.ggml.merges", {"a b"});
    w->KvU32("tokenizer.ggml.bos_token_id", 4);
    w->KvU32("tokenizer.ggml.eos_token_id", 3);
    w->KvBool("tokenizer.ggml.add_bos_token", false);
    w->KvString("tokenizer.chat_template", "{{ messages }}");
  }
  uint32_t seed = 1;
  auto add = [&](const std::string& name, int64_t n, int64_t k, xrt::WeightFormat f) {
    if (auto o = m.other.find(name.substr(0, name.rfind('.'))); o != m.other.end()) {
      const xcc::DTypeLayout layout = xcc::GetDTypeLayout(o->second);
      const int64_t blocks = n * k / layout.block_elems;
      std::mt19937 rng(seed++);
      std::string bytes(static_cast<size_t>(blocks) * layout.block_bytes, '\0');
      for (auto& b : bytes) b = static_cast<char>(rng());
      for (int64_t b = 0; b < blocks; ++b) {
        const uint16_t d = xrt::FloatToHalf(0.0002f * static_cast<float>(rng() % 64 + 1));
        std::memcpy(&bytes[b * layout.block_bytes], &d, 2);
      }
      std::vector<float> values(n * k);
      EXPECT_TRUE(xcc::ConvertToF32(o->second, reinterpret_cast<const uint8_t*>(bytes.data()),
                                    bytes.size(), n * k, values.data())
                      .ok());
      wq.Tensor(
          name, {static_cast<uint64_t>(k), static_cast<uint64_t>(n)},
          o->second == xcc::SourceDType::kIQ4_NL ? xcc::testing::kTIQ4_NL : xcc::testing::kTIQ4_XS,
          bytes);
      wf.TensorF32(name, {static_cast<uint64_t>(k), static_cast<uint64_t>(n)}, values);
      return;
    }
    const std::string layer = "blk.0.";
    const bool q3k = name.rfind(layer, 0) == 0 &&
                     m.q3k.count(name.substr(layer.size(), name.rfind('.') - layer.size()));
    if (q3k) f = xrt::WeightFormat::kQ3_K;
    std::vector<uint8_t> rows = xrt::testing::RandomKQuantRows(f, n, k, seed++);
    wq.Tensor(name, {static_cast<uint64_t>(k), static_cast<uint64_t>(n)}, GgmlType(f),
              std::string(rows.begin(), rows.end()));
    std::vector<uint8_t> packed(xrt::PackedWeightBytes(f, n, k));
    xrt::PackWeightsFromBlocks(f, rows.data(), n, k, xrt::GgmlRowBytes(f, k), packed.data());
    std::vector<float> values(n * k);
    for (int64_t r = 0; r < n; ++r)
      xrt::DequantizePackedRow(f, packed.data(), n, k, r, values.data() + r * k);
    wf.TensorF32(name, {static_cast<uint64_t>(k), static_cast<uint64_t>(n)}, values);
  };
  auto norm = [&](const std::string& name) {
    std::vector<float> ones(kD);
    for (int64_t i = 0; i < kD; ++i) ones[i] = 1.0f + 0.01f * static_cast<float>(i % 7);
    wq.TensorF32(name, {kD}, ones);
    wf.TensorF32(name, {kD}, ones);
  };
  add("token_embd.weight", kVocab, kD, m.table);
  norm("blk.0.attn_norm.weight");
  add("blk.0.attn_q.weight", kHeads * kHd, kD, m.attn);
  add("blk.0.attn_k.weight", kKv * kHd, kD, m.attn);
  add("blk.0.attn_v.weight", kKv * kHd, kD, m.attn);
  add("blk.0.attn_output.weight", kD, kHeads * kHd, m.mlp);
  norm("blk.0.ffn_norm.weight");
  add("blk.0.ffn_gate.weight", kD, kD, m.mlp);
  add("blk.0.ffn_up.weight", kD, kD, m.mlp);
  add("blk.0.ffn_down.weight", kD, kD, m.attn);
  norm("output_norm.weight");
  if (m.output != xrt::WeightFormat::kF32) add("output.weight", kVocab, kD, m.output);
  xcc::testing::WriteFile(quantized.string(), wq.Build());
  xcc::testing::WriteFile(f32.string(), wf.Build());
}

TEST(KQuants, TablesAndLinearsBitIdenticalToTheirF32Values) {
  using F = xrt::WeightFormat;
  const KQuantModel models[] = {
      {F::kQ4_K, F::kQ5_K, F::kQ6_K, F::kQ4_K},  // untied
      {F::kQ5_K, F::kQ6_K, F::kQ4_K, F::kQ5_K},  // untied
      {F::kQ4_K, F::kF32, F::kQ5_K, F::kQ6_K},   // tied Q4_K table
      // Q3_K: q/k/v fused from three Q3_K parts, gate (Q3_K) beside up (Q6_K),
      // down alone.
      {F::kQ5_K,
       F::kF32,
       F::kQ6_K,
       F::kQ6_K,
       {"attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_down"}},
  };
  const json prompts =
      json::array({json{{"ids", {4, 0, 1, 2, 0, 0, 1}}}, json{{"ids", {1}}},
                   json{{"ids", {2, 2, 1, 0, 5, 4, 3, 0, 1, 2, 2, 1, 0, 0, 1, 2, 0, 1, 1, 1}}}});
  for (const KQuantModel& m : models) {
    const std::string label = std::string(xrt::WeightFormatName(m.table)) + "_" +
                              (m.output == F::kF32 ? "tied" : xrt::WeightFormatName(m.output)) +
                              (m.q3k.empty() ? "" : "_q3_k");
    SCOPED_TRACE(label);
    const fs::path dir = fs::temp_directory_path() / ("xcc_kquant_tables_" + label);
    fs::create_directories(dir);
    WriteKQuantGgufs(m, dir / "quantized.gguf", dir / "f32.gguf");
    const std::string quantized =
        CompileWith((dir / "quantized.gguf").string(), "auto", dir / "quantized.xpk");
    const std::string f32 = CompileWith((dir / "f32.gguf").string(), "auto", dir / "f32.xpk");
    auto a = xrt::Artifact::Open(quantized);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    for (uint32_t i = 0; i < (*a)->num_weights(); ++i) {
      const xpk::Weight* w = *(*a)->weight(i);
      if (w->name()->str().find("embed_tokens") != std::string::npos) {
        EXPECT_EQ(w->dtype(), static_cast<xpk::DType>(m.table)) << "the table stays a K-quant";
      }
      if (w->shape()->size() == 2) {  // every matrix a K-quant, none f32
        EXPECT_NE(w->dtype(), xpk::DType::f32) << w->name()->str();
      }
      if (!m.q3k.empty() && w->name()->str().find("down_proj") != std::string::npos) {
        EXPECT_EQ(w->dtype(), xpk::DType::q3_k) << "Q3_K stays q3_k";
      }
    }
    ExpectTheSameRuns(quantized, f32, prompts);
  }
}

// IQ4_NL / IQ4_XS tensors are kept as iq4_nl / iq4_xs (format 1.17; q8_0 and
// f32 before), wherever they are: an IQ4_NL table, q and v (beside a Q4_K k),
// gate with up fused from two IQ4_NL parts and an IQ4_XS down; then an
// untied IQ4_XS table (the compiled lookup's table path) with IQ4_XS k and
// o. Bit-identical to the f32 copy of the same values.
TEST(IQ4, KeptAsIq4NlAndIq4Xs) {
  using F = xrt::WeightFormat;
  using D = xcc::SourceDType;
  const KQuantModel models[] = {{F::kQ4_K,
                                 F::kQ6_K,
                                 F::kQ4_K,
                                 F::kQ5_K,
                                 {},
                                 {{"token_embd", D::kIQ4_NL},
                                  {"blk.0.attn_q", D::kIQ4_NL},
                                  {"blk.0.attn_v", D::kIQ4_NL},
                                  {"blk.0.ffn_gate", D::kIQ4_NL},
                                  {"blk.0.ffn_up", D::kIQ4_NL},
                                  {"blk.0.ffn_down", D::kIQ4_XS}}},
                                {F::kQ4_K,
                                 F::kQ6_K,
                                 F::kQ4_K,
                                 F::kQ5_K,
                                 {},
                                 {{"token_embd", D::kIQ4_XS},
                                  {"blk.0.attn_k", D::kIQ4_XS},
                                  {"blk.0.attn_output", D::kIQ4_XS}}}};
  for (const KQuantModel& m : models) {
    const bool nl_table = m.other.at("token_embd") == D::kIQ4_NL;
    SCOPED_TRACE(nl_table ? "IQ4_NL table" : "IQ4_XS table");
    const fs::path dir = fs::temp_directory_path() / (nl_table ? "xcc_iq4_nl" : "xcc_iq4_xs");
    fs::create_directories(dir);
    WriteKQuantGgufs(m, dir / "quantized.gguf", dir / "f32.gguf");
    const xcc::CompileOptions o =
        SmallCompileOptions((dir / "quantized.gguf").string(), dir / "quantized.xpk");
    auto summary = xcc::Compile(o);
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    for (const std::string& n : summary->weight_notes) {
      EXPECT_EQ(n.find("IQ4"), std::string::npos) << n;
    }
    auto a = xrt::Artifact::Open(o.output_path);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    int nl = 0, xs = 0;
    for (uint32_t i = 0; i < (*a)->num_weights(); ++i) {
      const xpk::Weight* w = *(*a)->weight(i);
      const std::string name = w->name()->str();
      if (name.find("embed_tokens") != std::string::npos) {
        EXPECT_EQ(w->dtype(), nl_table ? xpk::DType::iq4_nl : xpk::DType::iq4_xs);
      }
      if (nl_table && name.find("down_proj") != std::string::npos) {
        EXPECT_EQ(w->dtype(), xpk::DType::iq4_xs);
      }
      nl += w->dtype() == xpk::DType::iq4_nl;
      xs += w->dtype() == xpk::DType::iq4_xs;
    }
    EXPECT_EQ(nl, nl_table ? 3 : 0) << "the table, q with v, and gate/up";
    EXPECT_EQ(xs, nl_table ? 1 : 3);
    const std::string f32_artifact =
        CompileWith((dir / "f32.gguf").string(), "auto", dir / "f32.xpk");
    const json prompts = json::array({json{{"ids", {4, 0, 1, 2, 0, 0, 1}}}, json{{"ids", {1}}}});
    ExpectTheSameRuns(o.output_path, f32_artifact, prompts);
  }
}

// --weight-dtype cannot ask for an IQ4 format: there is no quantizer.
TEST(IQ4, NoQuantizer) {
  for (const char* f : {"iq4_nl", "iq4_xs"}) {
    xcc::CompileOptions o =
        SmallCompileOptions(kFixture.string(), fs::temp_directory_path() / "xcc_iq4_forced.xpk");
    o.weight_dtype = f;
    auto summary = xcc::Compile(o);
    ASSERT_FALSE(summary.ok()) << f;
    EXPECT_NE(
        summary.status().message().find(std::string("quantizing to ") + f + " is not supported"),
        std::string::npos)
        << summary.status().ToString();
  }
}

// Q3_K (most of a Q3_K_M file) is kept as q3_k (format 1.16; q6_k before),
// beside Q4_K / Q5_K / Q6_K: the untied Q3_K table and the Q6_K lm_head too.
TEST(Q3K, AutoKeepsGgufQ3KTensors) {
  using xcc::SourceDType;
  ExpectGgufTensorsKept("q3_k",
                        {{SourceDType::kQ3_K, xpk::DType::q3_k},
                         {SourceDType::kQ4_K, xpk::DType::q4_k},
                         {SourceDType::kQ5_K, xpk::DType::q5_k},
                         {SourceDType::kQ6_K, xpk::DType::q6_k}},
                        xpk::DType::q3_k);
}

// IQ4_NL / IQ4_XS (what llama.cpp's IQ4_XS writes) are kept as iq4_nl /
// iq4_xs (format 1.17), beside a Q6_K: the untied IQ4_XS table and the
// IQ4_NL lm_head too.
TEST(IQ4, AutoKeepsGgufIQ4Tensors) {
  using xcc::SourceDType;
  ExpectGgufTensorsKept("iq4",
                        {{SourceDType::kIQ4_NL, xpk::DType::iq4_nl},
                         {SourceDType::kIQ4_XS, xpk::DType::iq4_xs},
                         {SourceDType::kQ6_K, xpk::DType::q6_k}},
                        xpk::DType::iq4_xs);
}

// Q5_0 / Q5_1 (what llama.cpp's Q4_K_M and Q5_K_M write where K is not a
// multiple of 256) are kept too, beside Q8_0 (format 1.15; f32 before).
TEST(Q5, AutoKeepsGgufQ5Tensors) {
  using xcc::SourceDType;
  ExpectGgufTensorsKept("q5",
                        {{SourceDType::kQ5_0, xpk::DType::q5_0},
                         {SourceDType::kQ5_1, xpk::DType::q5_1},
                         {SourceDType::kQ8_0, xpk::DType::q8_0}},
                        xpk::DType::q5_1);
}

}  // namespace
