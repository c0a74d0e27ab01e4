// Numerics of compiled LLaVA-style models against HF transformers references.
//
// For every tiny LLaVA fixture (tests/fixtures/llava/<model>, made by
// tests/gen_llava_fixtures.py), compiled twice (image buckets 1, 2 and a single
// 1-image bucket, so two images run as two vision_encode calls), and for every
// reference case (0, 1 or 2 images):
//   - vision_encode of HF's pixel_values gives HF's image features (the
//     projector output) within 1e-4;
//   - with those rows in the encoder cache, one lm_step prefill whose image
//     placeholder tokens read them (embed_source) gives HF's last-position
//     logits within 1e-4, and 32 greedy decode steps give HF's greedy tokens.
// This drives ModelRunner directly: it checks the compiled executables and the
// merge, not the engine's scheduling of images. Bf16ComputeMatchesTheBf16Reference
// does the same for `--compute bf16` against reference_bf16.json (see there).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "runtime/executor/model_runner.h"
#include "tests/numerics/fixture_io.h"
#include "tests/numerics/greedy.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using xrt::Status;

fs::path ModelDir(const std::string& name) {
  return fs::path(XCC_SOURCE_DIR) / "tests/fixtures/llava" / name;
}

using xcc::testing::ReadJson;

using xcc::testing::ReadF32;

float MaxAbsDiff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class LlavaNumerics : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Compile(const std::string& name, const std::string& tag,
                      std::vector<int64_t> image_buckets, const std::string& compute = "f32",
                      const std::string& weight_dtype = "auto") {
    fs::path dir = fs::temp_directory_path() / ("xcc_llava_numerics_" + name);
    fs::create_directories(dir);
    xcc::CompileOptions o;
    o.model_path = ModelDir(name).string();
    o.output_path = (dir / (tag + ".xpk")).string();
    o.quiet = true;
    o.limits.max_num_seqs = 2;
    o.limits.max_model_len = 256;
    o.limits.max_num_batched_tokens = 128;
    o.image_buckets = std::move(image_buckets);
    o.compute = compute;
    o.weight_dtype = weight_dtype;
    auto s = xcc::Compile(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return o.output_path;
  }
};

// Runs one prefill of `ids` (image placeholders reading `sources`) and `steps`
// greedy decodes; returns the prefill's logits and the greedy tokens.
struct RunResult {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
};
RunResult PrefillAndDecode(xrt::ModelRunner& runner, const std::vector<int32_t>& ids,
                           const std::vector<int32_t>& sources, int steps) {
  RunResult r;
  const int64_t block = runner.limits().block_size;
  std::vector<int32_t> table;
  for (int64_t b = 0; b * block < static_cast<int64_t>(ids.size()) + steps; ++b)
    table.push_back(static_cast<int32_t>(b));
  xrt::StepInputs in;
  xrt::ScheduledRequest req;
  req.token_ids = ids.data();
  req.num_tokens = static_cast<int64_t>(ids.size());
  req.block_table = &table;
  req.needs_logits = true;
  req.embed_source = sources.data();
  Status s = runner.input_builder().Build({req}, &in);
  EXPECT_TRUE(s.ok()) << s.ToString();
  auto logits = runner.Execute(in);
  EXPECT_TRUE(logits.ok()) << logits.status().ToString();
  if (!logits.ok()) return r;
  const int64_t vocab = runner.vocab_size();
  r.logits.assign(*logits, *logits + vocab);
  int64_t computed = static_cast<int64_t>(ids.size());
  const float* last = *logits;
  for (int i = 0; i < steps; ++i) {
    int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    r.tokens.push_back(next);
    xrt::ScheduledRequest d;
    d.token_ids = &r.tokens.back();
    d.num_tokens = 1;
    d.num_computed_tokens = computed++;
    d.block_table = &table;
    d.needs_logits = true;
    EXPECT_TRUE(runner.input_builder().Build({d}, &in).ok());
    auto l = runner.Execute(in);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) return r;
    last = *l;
  }
  return r;
}

// Encodes case c's images (HF's pixel values) in the largest batches of at most
// max_batch images, image i into encoder cache rows [i * tpi, (i + 1) * tpi), and
// sets *sources to the prompt's embed_source: each image placeholder token reads
// its row in order, the other tokens -1.
void EncodeCase(xrt::ModelRunner& runner, const std::string& name, const json& c, int64_t max_batch,
                int64_t tpi, int32_t image_token, std::vector<int32_t>* sources) {
  const std::vector<int32_t> ids = c["input_ids"].get<std::vector<int32_t>>();
  const int64_t num_images = static_cast<int64_t>(c["images"].size());
  sources->assign(ids.size(), -1);
  if (num_images == 0) return;
  std::vector<float> px = ReadF32(ModelDir(name) / c["pixel_values"]["file"].get<std::string>());
  const int64_t per_image = static_cast<int64_t>(px.size()) / num_images;
  for (int64_t i = 0; i < num_images;) {
    const int64_t n = std::min<int64_t>(max_batch, num_images - i);
    std::vector<int64_t> rows;
    std::vector<const float*> images;
    for (int64_t j = 0; j < n; ++j) {
      rows.push_back((i + j) * tpi);
      images.push_back(px.data() + (i + j) * per_image);
    }
    Status s = runner.EncodeImages(images, rows);
    ASSERT_TRUE(s.ok()) << s.ToString();
    i += n;
  }
  int32_t row = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] == image_token) (*sources)[t] = row++;
  ASSERT_EQ(row, num_images * tpi);
}

TEST_P(LlavaNumerics, MatchesTransformers) {
  const std::string name = GetParam();
  const json ref = ReadJson(ModelDir(name) / "reference.json");
  const json& facts = ref["loader_facts"];
  const int64_t tpi = facts["tokens_per_image"].get<int64_t>();
  const int32_t image_token = facts["image_token_id"].get<int32_t>();
  for (const auto& [tag, buckets] : {std::pair{std::string("b12"), std::vector<int64_t>{1, 2}},
                                     {std::string("b1"), std::vector<int64_t>{1}}}) {
    const std::string path = Compile(name, tag, buckets);
    xrt::ModelRunnerParams rp;
    rp.artifact_path = path;
    rp.num_threads = 2;
    auto runner = xrt::ModelRunner::Create(rp);
    ASSERT_TRUE(runner.ok()) << runner.status().ToString();
    ASSERT_EQ((*runner)->image_buckets(), buckets);
    const int64_t hidden = facts["text_hidden_size"].get<int64_t>();
    for (const json& c : ref["cases"]) {
      SCOPED_TRACE(name + " " + c["name"].get<std::string>() + " via " + path);
      const std::vector<int32_t> ids = c["input_ids"].get<std::vector<int32_t>>();
      const int64_t num_images = static_cast<int64_t>(c["images"].size());
      std::vector<int32_t> sources;
      ASSERT_NO_FATAL_FAILURE(
          EncodeCase(**runner, name, c, buckets.back(), tpi, image_token, &sources));
      if (num_images > 0) {
        std::vector<float> want =
            ReadF32(ModelDir(name) / c["image_features"]["file"].get<std::string>());
        ASSERT_EQ(want.size(), static_cast<size_t>(num_images * tpi * hidden));
        EXPECT_LE(MaxAbsDiff((*runner)->encoder_cache().data(), want.data(), want.size()), 1e-4f)
            << "image features differ from HF";
      }
      RunResult r = PrefillAndDecode(**runner, ids, sources, 32);
      const std::vector<float> expected = c["last_logits"].get<std::vector<float>>();
      ASSERT_EQ(r.logits.size(), expected.size());
      EXPECT_LE(MaxAbsDiff(r.logits.data(), expected.data(), expected.size()), 1e-4f)
          << "last-position logits differ from HF";
      EXPECT_EQ(r.tokens, c["greedy_ids"].get<std::vector<int32_t>>())
          << "greedy continuation differs from HF";
    }
  }
}

// `--compute bf16` (compute_bf16_numerics_test.cc does the decoders) against
// reference_bf16.json (tests/gen_bf16_references.py): HF transformers with every
// linear of the tower, the projector and the decoder, the patch embedding, and the
// two products of the tower's attention computing runtime/kernels/matmul.h's kBF16
// contract (dense_attention.h). As for the decoders, the products are the same
// arithmetic but the softmax, norms and activations are float32 code of our own,
// whose last-bit differences move a later bf16 rounding now and then, and a moved
// rounding spreads through attention to the image's other rows (here, 2 of 10
// cases' features have some rows off, by up to 0.085 in llava_clip_qwen2_full,
// whose features reach 15.6; the rest are within 3.3e-4). So: every case's image
// features must be within kFeatureFlipTol of the reference's and its last logits
// within kFlipTol, at least kExactShare of all the feature values within 1e-4 (a
// systematic difference, such as the patch embedding or the attention in float32,
// or a product in another k order, leaves under 7% that close), and greedy tokens
// equal up to the reference's first near tie. The deviation from float32
// (reference.json) is printed, the README's LLaVA rows of its bf16 table, and must
// not be zero.
TEST_P(LlavaNumerics, Bf16ComputeMatchesTheBf16Reference) {
  constexpr float kExactTol = 1e-4f, kFlipTol = 0.1f, kFeatureFlipTol = 0.2f, kMinMargin = 0.12f;
  constexpr double kExactShare = 0.25;
  const std::string name = GetParam();
  const json ref = ReadJson(ModelDir(name) / "reference.json");
  const json ref16 = ReadJson(ModelDir(name) / "reference_bf16.json");
  ASSERT_EQ(ref["cases"].size(), ref16["cases"].size());
  const json& facts = ref["loader_facts"];
  const int64_t tpi = facts["tokens_per_image"].get<int64_t>();
  const int32_t image_token = facts["image_token_id"].get<int32_t>();
  const std::vector<int64_t> buckets = {1, 2};
  const std::string path = Compile(name, "bf16", buckets, "bf16");
  xrt::ModelRunnerParams rp;
  rp.artifact_path = path;
  rp.num_threads = 2;
  rp.kv_cache_dtype = xrt::KvCacheDtype::kF32;  // the compute mode alone
  auto runner = xrt::ModelRunner::Create(rp);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  float feat_vs_f32 = 0, feat_vs_16 = 0, logit_vs_f32 = 0, logit_vs_16 = 0;
  size_t features = 0, exact_features = 0, cases_exact = 0, agree_f32 = 0, tokens = 0;
  for (size_t i = 0; i < ref["cases"].size(); ++i) {
    const json& c = ref["cases"][i];
    const json& c16 = ref16["cases"][i];
    ASSERT_EQ(c["name"], c16["name"]);
    SCOPED_TRACE(name + " " + c["name"].get<std::string>() + " via " + path);
    const std::vector<int32_t> ids = c["input_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> sources;
    ASSERT_NO_FATAL_FAILURE(
        EncodeCase(**runner, name, c, buckets.back(), tpi, image_token, &sources));
    if (!c["images"].empty()) {
      std::vector<float> want16 =
          ReadF32(ModelDir(name) / c16["image_features"]["file"].get<std::string>());
      std::vector<float> want32 =
          ReadF32(ModelDir(name) / c["image_features"]["file"].get<std::string>());
      ASSERT_EQ(want16.size(), want32.size());
      const float* got = (*runner)->encoder_cache().data();
      const float d16 = MaxAbsDiff(got, want16.data(), want16.size());
      EXPECT_LE(d16, kFeatureFlipTol) << "image features differ from the bf16 reference";
      feat_vs_16 = std::max(feat_vs_16, d16);
      feat_vs_f32 = std::max(feat_vs_f32, MaxAbsDiff(got, want32.data(), want32.size()));
      for (size_t j = 0; j < want16.size(); ++j)
        exact_features += std::fabs(got[j] - want16[j]) <= kExactTol;
      features += want16.size();
    }
    RunResult r = PrefillAndDecode(**runner, ids, sources, 32);
    const std::vector<float> l16 = c16["last_logits"].get<std::vector<float>>();
    const std::vector<float> l32 = c["last_logits"].get<std::vector<float>>();
    ASSERT_EQ(r.logits.size(), l16.size());
    const float d16 = MaxAbsDiff(r.logits.data(), l16.data(), l16.size());
    EXPECT_LE(d16, kFlipTol) << "last-position logits differ from the bf16 reference";
    logit_vs_16 = std::max(logit_vs_16, d16);
    logit_vs_f32 = std::max(logit_vs_f32, MaxAbsDiff(r.logits.data(), l32.data(), l32.size()));
    cases_exact += d16 <= kExactTol;
    const size_t decisive =
        xcc::testing::DecisiveSteps(c16["greedy_margins"].get<std::vector<float>>(), kMinMargin);
    EXPECT_GE(
        xcc::testing::LeadingAgreement(r.tokens, c16["greedy_ids"].get<std::vector<int32_t>>()),
        decisive)
        << "greedy differs from the bf16 reference before step " << decisive
        << ", its first near tie";
    agree_f32 +=
        xcc::testing::LeadingAgreement(r.tokens, c["greedy_ids"].get<std::vector<int32_t>>());
    tokens += r.tokens.size();
  }
  EXPECT_GT(logit_vs_f32, 1e-3f) << "bf16 compute gives float32's logits: is it on?";
  EXPECT_GE(exact_features, kExactShare * features)
      << "too few image feature values within " << kExactTol << " of the bf16 reference";
  std::printf(
      "| fixture | max abs image feature error vs f32 | max abs logit error vs f32 | greedy "
      "tokens as f32's | max abs vs bf16 reference (features, logits) | feature values within "
      "1e-4 of it | cases' logits within 1e-4 of it |\n"
      "| %s | %.3f | %.3f | %zu / %zu | %.3f, %.3f | %.0f%% | %zu / %zu |\n",
      name.c_str(), feat_vs_f32, logit_vs_f32, agree_f32, tokens, feat_vs_16, logit_vs_16,
      100.0 * exact_features / std::max<size_t>(features, 1), cases_exact, ref["cases"].size());
}

// `--compute int8` (llama.cpp's arithmetic on the integer quants; the decoders'
// test is compute_int8_numerics_test.cc) on a LLaVA model: compiled with
// --weight-dtype q8_0, the tower's, projector's and decoder's linears whose K
// is a multiple of 32 multiply int8 activations with the q8_0 quants (the others
// keep f32 weights and compute). Against f32 compute on the same q8_0 weights:
// every case's image features and last logits stay within kMaxRelative of the
// largest |value| of the f32-compute ones, and differ from them (the mode is
// on); both deviations and the greedy agreement are printed (the README's LLaVA
// rows of its int8 table).
TEST_P(LlavaNumerics, Int8ComputeStaysCloseToF32OnTheSameWeights) {
  // Measured at most 2.4% (features) and 4.9% (logits) here; about three times
  // that (the decoders' bound is 0.3 for up to 15.7%).
  constexpr float kMaxRelative = 0.15f;
  const std::string name = GetParam();
  const json ref = ReadJson(ModelDir(name) / "reference.json");
  const json& facts = ref["loader_facts"];
  const int64_t tpi = facts["tokens_per_image"].get<int64_t>();
  const int32_t image_token = facts["image_token_id"].get<int32_t>();
  const std::vector<int64_t> buckets = {1, 2};
  auto open = [&](const std::string& compute) {
    xrt::ModelRunnerParams rp;
    rp.artifact_path = Compile(name, "q8_0_" + compute, buckets, compute, "q8_0");
    rp.num_threads = 2;
    rp.kv_cache_dtype = xrt::KvCacheDtype::kF32;  // the compute mode alone
    return xrt::ModelRunner::Create(rp);
  };
  auto f32 = open("f32");
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  auto int8 = open("int8");
  ASSERT_TRUE(int8.ok()) << int8.status().ToString();
  auto max_abs = [](const float* x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
    return m;
  };
  float feat_dev = 0, logit_dev = 0, feat_rel = 0, logit_rel = 0;
  size_t agree = 0, tokens = 0;
  for (const json& c : ref["cases"]) {
    SCOPED_TRACE(name + " " + c["name"].get<std::string>());
    const std::vector<int32_t> ids = c["input_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> sources;
    ASSERT_NO_FATAL_FAILURE(EncodeCase(**f32, name, c, buckets.back(), tpi, image_token, &sources));
    ASSERT_NO_FATAL_FAILURE(
        EncodeCase(**int8, name, c, buckets.back(), tpi, image_token, &sources));
    if (!c["images"].empty()) {
      const size_t rows =
          static_cast<size_t>(c["images"].size() * tpi * facts["text_hidden_size"].get<int64_t>());
      const float* want = (*f32)->encoder_cache().data();
      const float* got = (*int8)->encoder_cache().data();
      const float d = MaxAbsDiff(got, want, rows), rel = d / max_abs(want, rows);
      EXPECT_GT(d, 0.0f) << "int8 compute gives f32 compute's image features: is it on?";
      EXPECT_LE(rel, kMaxRelative) << "image features: " << d;
      feat_dev = std::max(feat_dev, d);
      feat_rel = std::max(feat_rel, rel);
    }
    RunResult want = PrefillAndDecode(**f32, ids, sources, 32);
    RunResult got = PrefillAndDecode(**int8, ids, sources, 32);
    ASSERT_EQ(got.logits.size(), want.logits.size());
    const float d = MaxAbsDiff(got.logits.data(), want.logits.data(), want.logits.size());
    const float rel = d / max_abs(want.logits.data(), want.logits.size());
    EXPECT_GT(d, 0.0f) << "int8 compute gives f32 compute's logits: is it on?";
    EXPECT_LE(rel, kMaxRelative) << "last logits: " << d;
    logit_dev = std::max(logit_dev, d);
    logit_rel = std::max(logit_rel, rel);
    agree += xcc::testing::LeadingAgreement(got.tokens, want.tokens);
    tokens += want.tokens.size();
  }
  std::printf(
      "| fixture | max abs image feature deviation (share of max |feature|) | max abs last-logit "
      "deviation (share of max |logit|) | greedy tokens as f32 compute's (leading) |\n"
      "| %s | %.3f (%.1f%%) | %.3f (%.1f%%) | %zu / %zu |\n",
      name.c_str(), feat_dev, 100 * feat_rel, logit_dev, 100 * logit_rel, agree, tokens);
}

// A content hash of an image's pixels for the test (the server hashes the
// decoded image with its preprocessing parameters instead).
xrt::BlockHash PixelHash(const float* p, size_t n) {
  uint64_t a = 1469598103934665603ULL, b = 0x9e3779b97f4a7c15ULL;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n * sizeof(float); ++i) {
    a = (a ^ bytes[i]) * 1099511628211ULL;
    b = (b + bytes[i]) * 0xff51afd7ed558ccdULL;
  }
  return xrt::BlockHash{a, b};
}

// The fixture case's images as an EngineRequest carries them: one span per run of
// tokens_per_image image tokens, in order, with HF's pixel values.
std::vector<xrt::ImageInput> CaseImages(const std::string& name, const json& c, int64_t tpi,
                                        int32_t image_token) {
  std::vector<xrt::ImageInput> out;
  const int64_t n = static_cast<int64_t>(c["images"].size());
  if (n == 0) return out;
  std::vector<float> px = ReadF32(ModelDir(name) / c["pixel_values"]["file"].get<std::string>());
  const std::vector<int32_t> ids = c["input_ids"].get<std::vector<int32_t>>();
  const size_t per_image = px.size() / static_cast<size_t>(n);
  int64_t t = 0;
  for (int64_t i = 0; i < n; ++i) {
    while (ids[t] != image_token) ++t;
    xrt::ImageInput image;
    image.span.offset = t;
    image.span.length = tpi;
    image.span.content_hash = PixelHash(px.data() + i * per_image, per_image);
    image.pixel_values = std::make_shared<std::vector<float>>(px.begin() + i * per_image,
                                                              px.begin() + (i + 1) * per_image);
    out.push_back(std::move(image));
    t += tpi;
  }
  return out;
}

// The same references through the engine core, as the server runs requests: the
// scheduler places image rows in the encoder cache and fills embed_source, with
// a wide artifact and with one whose 16-token steps cut prompts (and images) into
// chunks while encoding one image per step.
TEST_P(LlavaNumerics, EngineMatchesTransformers) {
  const std::string name = GetParam();
  const json ref = ReadJson(ModelDir(name) / "reference.json");
  const json& facts = ref["loader_facts"];
  const int64_t tpi = facts["tokens_per_image"].get<int64_t>();
  const int32_t image_token = facts["image_token_id"].get<int32_t>();
  fs::path dir = fs::temp_directory_path() / ("xcc_llava_engine_" + name);
  fs::create_directories(dir);
  for (bool chunked : {false, true}) {
    xcc::CompileOptions o;
    o.model_path = ModelDir(name).string();
    o.output_path = (dir / (chunked ? "chunked.xpk" : "wide.xpk")).string();
    o.quiet = true;
    o.limits.max_num_seqs = 2;
    o.limits.max_model_len = 256;
    o.limits.max_num_batched_tokens = chunked ? 16 : 128;
    if (chunked) o.token_buckets = {16};
    auto compiled = xcc::Compile(o);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    auto engine = xcc::testing::OpenEngine(o.output_path);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    for (const json& c : ref["cases"]) {
      SCOPED_TRACE(name + " " + c["name"].get<std::string>() + " via " + o.output_path);
      auto result = xcc::testing::Greedy(*engine->core, c["input_ids"].get<std::vector<int32_t>>(),
                                         32, CaseImages(name, c, tpi, image_token));
      ASSERT_TRUE(result.status.ok()) << result.status.ToString();
      const std::vector<float> expected = c["last_logits"].get<std::vector<float>>();
      ASSERT_EQ(result.prompt_logits.size(), expected.size());
      EXPECT_LE(MaxAbsDiff(result.prompt_logits.data(), expected.data(), expected.size()), 1e-4f)
          << "last-position logits differ from HF";
      EXPECT_EQ(result.tokens, c["greedy_ids"].get<std::vector<int32_t>>())
          << "greedy continuation differs from HF";
    }
  }
}

// A PEFT adapter on the language model of a LLaVA model (tests/fixtures/lora/
// llava_clip_llama, made by tests/gen_lora_fixtures.py): the vision tower and
// projector get no LoRA; text and image prompts match PEFT.
TEST(LlavaLora, LanguageModelAdapterMatchesPeft) {
  const std::string name = "llava_clip_llama";
  const json base = ReadJson(ModelDir(name) / "reference.json");
  const fs::path lora_dir = fs::path(XCC_SOURCE_DIR) / "tests/fixtures/lora" / name;
  const json ref = ReadJson(lora_dir / "reference.json");
  const json& facts = base["loader_facts"];
  const int64_t tpi = facts["tokens_per_image"].get<int64_t>();
  const int32_t image_token = facts["image_token_id"].get<int32_t>();
  fs::path dir = fs::temp_directory_path() / ("xcc_llava_lora_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  xcc::CompileOptions o;
  o.model_path = ModelDir(name).string();
  o.output_path = (dir / "lora.xpk").string();
  o.quiet = true;
  o.limits.max_num_seqs = 2;
  o.limits.max_model_len = 256;
  o.limits.max_num_batched_tokens = 128;
  o.enable_lora = true;
  o.max_loras = 1;
  o.max_lora_rank = ref["max_lora_rank"].get<int64_t>();
  ASSERT_TRUE(xcc::Compile(o).ok());
  xrt::ModelRunnerParams rp;
  rp.artifact_path = o.output_path;
  rp.num_threads = 2;
  auto runner = xrt::ModelRunner::Create(rp);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  const json& adapter = ref["adapters"][0];
  auto lora = (*runner)->lora_registry()->Load(
      adapter["name"].get<std::string>(), (lora_dir / adapter["dir"].get<std::string>()).string());
  ASSERT_TRUE(lora.ok()) << lora.status().ToString();
  const int64_t vocab = ref["vocab_size"].get<int64_t>();
  for (const json& res : adapter["results"]) {
    const std::string prompt = res["prompt"];
    SCOPED_TRACE(prompt);
    const json* c = nullptr;
    for (const json& bc : base["cases"])
      if (bc["name"] == prompt) c = &bc;
    ASSERT_NE(c, nullptr);
    xrt::EngineCoreParams cp = (*runner)->engine_core_params();
    cp.enable_prefix_caching = false;
    auto core = xrt::EngineCore::Create(cp);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    const std::vector<int32_t> ids = (*c)["input_ids"].get<std::vector<int32_t>>();
    auto result =
        xcc::testing::Greedy(**core, ids, 32, CaseImages(name, *c, tpi, image_token), *lora);
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    const std::vector<float> all =
        ReadF32(lora_dir / "logits" / res["logits"]["file"].get<std::string>());
    ASSERT_GE(all.size(), ids.size() * vocab);
    ASSERT_EQ(result.prompt_logits.size(), static_cast<size_t>(vocab));
    EXPECT_LE(MaxAbsDiff(result.prompt_logits.data(), all.data() + (ids.size() - 1) * vocab, vocab),
              1e-4f)
        << "last-position logits differ from PEFT";
    EXPECT_EQ(result.tokens, res["greedy_ids"].get<std::vector<int32_t>>())
        << "greedy continuation differs from PEFT";
  }
}

// Prefix caching with images (block size 4): the same text with another image
// shares only the blocks before the image; the same prompt again reuses its KV
// prefix through the image; the same image after other text is not in the KV
// cache but its encoder output is (an encoder cache hit, nothing encoded).
// Every output equals the same request run alone on a fresh engine.
TEST(LlavaPrefixCaching, ImagesKeyTheBlocksAndTheEncoderCache) {
  const std::string name = "llava_clip_llama";
  const json ref = ReadJson(ModelDir(name) / "reference.json");
  const json& facts = ref["loader_facts"];
  const int64_t tpi = facts["tokens_per_image"].get<int64_t>();
  const int32_t image_token = facts["image_token_id"].get<int32_t>();
  const json* one = nullptr;
  const json* two = nullptr;
  for (const json& c : ref["cases"]) {
    if (c["images"].size() == 1 && !one) one = &c;
    if (c["images"].size() == 2 && !two) two = &c;
  }
  ASSERT_TRUE(one && two);
  fs::path dir = fs::temp_directory_path() / "xcc_llava_prefix";
  fs::create_directories(dir);
  xcc::CompileOptions o;
  o.model_path = ModelDir(name).string();
  o.output_path = (dir / "b4.xpk").string();
  o.quiet = true;
  o.limits.max_num_seqs = 2;
  o.limits.max_model_len = 256;
  o.limits.max_num_batched_tokens = 64;
  o.limits.block_size = 4;
  ASSERT_TRUE(xcc::Compile(o).ok());
  xrt::ModelRunnerParams rp;
  rp.artifact_path = o.output_path;
  rp.num_threads = 2;
  auto runner = xrt::ModelRunner::Create(rp);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  struct Run {
    std::vector<int32_t> tokens;
    int64_t cached = 0, encoded = 0, hits = 0;
  };
  auto run = [&](xrt::EngineCore& core, const std::vector<int32_t>& prompt,
                 std::vector<xrt::ImageInput> images) {
    Run r;
    xrt::EngineRequest req;
    req.request_id = "r";
    req.prompt = prompt;
    req.max_tokens = 8;
    req.ignore_eos = true;
    req.sampling.temperature = 0.0f;
    req.images = std::move(images);
    EXPECT_TRUE(core.AddRequest(std::move(req)).ok());
    for (int steps = 0; core.HasUnfinished(); ++steps) {
      if (steps == 100) {
        ADD_FAILURE() << "the request did not finish in 100 steps";
        core.AbortAll();
        break;
      }
      xrt::EngineCoreOutputs out = core.Step();
      EXPECT_TRUE(out.stats.error.ok()) << out.stats.error.ToString();
      r.encoded += out.stats.images_encoded;
      r.hits += out.stats.encoder_cache_hits;
      for (const xrt::RequestOutput& ro : out.outputs) {
        for (const xrt::GeneratedToken& t : ro.tokens) r.tokens.push_back(t.token);
        r.cached = ro.cached_tokens;
      }
    }
    return r;
  };
  // The reference runs use a runner of their own: a runner's KV and encoder
  // cache memory belong to one engine core.
  auto alone_runner = xrt::ModelRunner::Create(rp);
  ASSERT_TRUE(alone_runner.ok());
  auto alone = [&](const std::vector<int32_t>& prompt, std::vector<xrt::ImageInput> images) {
    xrt::EngineCoreParams cp = (*alone_runner)->engine_core_params();
    cp.enable_prefix_caching = false;
    auto fresh = xrt::EngineCore::Create(cp);
    EXPECT_TRUE(fresh.ok());
    return run(**fresh, prompt, std::move(images)).tokens;
  };

  xrt::EngineCoreParams cp = (*runner)->engine_core_params();
  cp.enable_prefix_caching = true;
  auto core = xrt::EngineCore::Create(cp);
  ASSERT_TRUE(core.ok());
  const std::vector<int32_t> ids = (*one)["input_ids"].get<std::vector<int32_t>>();
  std::vector<xrt::ImageInput> image_a = CaseImages(name, *one, tpi, image_token);
  std::vector<xrt::ImageInput> image_b = CaseImages(name, *two, tpi, image_token);
  ASSERT_EQ(image_a.size(), 1u);
  const int64_t offset = image_a[0].span.offset;
  // Another image at the same place: B's first image, moved to A's span.
  std::vector<xrt::ImageInput> other = {image_b[0]};
  other[0].span = image_a[0].span;
  other[0].span.content_hash = image_b[0].span.content_hash;

  Run a = run(**core, ids, image_a);
  EXPECT_EQ(a.cached, 0);
  EXPECT_EQ(a.encoded, 1);
  Run b = run(**core, ids, other);
  EXPECT_EQ(b.cached, offset / 4 * 4) << "only the blocks before the image are shared";
  EXPECT_EQ(b.encoded, 1);
  EXPECT_EQ(b.tokens, alone(ids, other));
  EXPECT_NE(b.tokens, a.tokens) << "the image must matter";
  Run a2 = run(**core, ids, image_a);
  EXPECT_GE(a2.cached, offset + tpi) << "the same prompt and image reuse the KV through the image";
  EXPECT_EQ(a2.encoded, 0);
  EXPECT_EQ(a2.tokens, a.tokens);
  // The same image after different leading text: no KV prefix covers it, the
  // encoder cache does.
  std::vector<int32_t> shifted = ids;
  shifted[1] = shifted[1] == 5 ? 6 : 5;
  Run d = run(**core, shifted, image_a);
  EXPECT_LT(d.cached, offset);
  EXPECT_EQ(d.encoded, 0);
  EXPECT_EQ(d.hits, 1);
  EXPECT_EQ(d.tokens, alone(shifted, image_a));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlavaNumerics,
                         ::testing::Values("llava_clip_llama", "llava_clip_qwen2_full",
                                           "llava_siglip"));

}  // namespace
