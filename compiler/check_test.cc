// xcc check: coverage gaps and staleness are findings naming what is wrong.
#include "compiler/check.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/artifact/artifact_patch_for_tests.h"
#include "compiler/compile.h"
#include "compiler/serving_model.h"
#include "runtime/engine/artifact_params.h"
#include "runtime/loader/artifact.h"
#include "runtime/loader/segment_checksum.h"

namespace xcc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Flips the lowest bit of the byte at `offset` of the file at `path`, in place.
void FlipByte(const fs::path& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 1);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// Index of the first segment of `kind` in the artifact at `path`.
uint32_t SegmentOfKind(const std::string& path, xpk::SegmentKind kind) {
  std::vector<uint8_t> bytes = ReadBytes(path);
  const auto* segments = ManifestOf(bytes)->segments();
  for (uint32_t i = 0; i < segments->size(); ++i)
    if (segments->Get(i)->kind() == kind) return i;
  ADD_FAILURE() << path << " has no " << xpk::EnumNameSegmentKind(kind) << " segment";
  return 0;
}

// `r` ran and has exactly one finding, of `kind`, saying `message`.
void ExpectOneFinding(const xrt::Expected<CheckReport>& r, const std::string& kind,
                      const std::string& message) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 1u) << r->ToText();
  EXPECT_EQ(r->findings[0].kind, kind);
  EXPECT_EQ(r->findings[0].message, message);
}

// Replays `trace` on the artifact at `path` served under the config at
// `serving_config` ("": its own limits) as xcc check does, into *out.
void ReplayAsChecked(const std::string& path, const std::string& serving_config,
                     const std::string& trace, xrt::ReplayReport* out) {
  auto artifact = xrt::Artifact::Open(path);
  ASSERT_TRUE(artifact.ok()) << artifact.status().ToString();
  auto serving = LoadServingConfig(**artifact, serving_config);
  ASSERT_TRUE(serving.ok()) << serving.status().ToString();
  auto requests = ReadTraceFor(**artifact, *serving, trace);
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  const xrt::CompiledBuckets b = xrt::CompiledBucketsOf(**artifact);
  auto table = xrt::BucketTable::Create(b.tokens, b.reqs, b.images);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  auto params = ReplayParamsFor(**artifact, *serving, std::move(*table));
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  params->lm_step_executables = LmStepExecutablesOf(**artifact);
  auto rep = xrt::Replay(*params, *requests);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  *out = std::move(*rep);
}

// `o` finds nothing; after flipping a byte of `file` it finds exactly that
// file stale, saying `message`.
void ExpectStaleAfterFlip(const CheckOptions& o, const fs::path& file, const std::string& message) {
  auto fresh = RunCheck(o);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE(fresh->findings.empty()) << fresh->ToText();
  FlipByte(file, fs::file_size(file) - 7);
  auto stale = RunCheck(o);
  ASSERT_TRUE(stale.ok()) << stale.status().ToString();
  ASSERT_EQ(stale->findings.size(), 1u) << stale->ToText();
  EXPECT_EQ(stale->findings[0].kind, "stale");
  EXPECT_THAT(stale->findings[0].message, HasSubstr(message));
}

class CheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xcc_check_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_ = dir_ / "model";
    fs::copy(fs::path(XCC_SOURCE_DIR) / "tests/fixtures/models/llama_gqa", model_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Compile(const std::string& name, std::vector<int64_t> buckets, int64_t budget,
                      int64_t seqs) {
    CompileOptions o;
    o.model_path = model_.string();
    o.output_path = (dir_ / name).string();
    o.quiet = true;
    o.token_buckets = std::move(buckets);
    o.limits.max_num_batched_tokens = budget;
    o.limits.max_num_seqs = seqs;
    o.limits.max_model_len = 256;
    auto s = xcc::Compile(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return o.output_path;
  }

  // The tiny LLaVA fixture (16 tokens per image) compiled for a token budget of
  // `budget` (64: four images per step) with these vision_encode buckets.
  std::string CompileLlava(const std::string& name, std::vector<int64_t> image_buckets,
                           int64_t budget = 64) {
    CompileOptions o;
    o.model_path = (fs::path(XCC_SOURCE_DIR) / "tests/fixtures/llava/llava_clip_llama").string();
    o.output_path = (dir_ / name).string();
    o.quiet = true;
    o.image_buckets = std::move(image_buckets);
    o.limits.max_num_batched_tokens = budget;
    o.limits.max_num_seqs = 4;
    o.limits.max_model_len = 256;
    auto s = xcc::Compile(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return o.output_path;
  }

  // llama_gqa with LoRA: `max_loras` slots of rank 8, buckets 16, 32, 64, and
  // the adapters `packed` (name=dir) packed into it.
  std::string CompileLora(const std::string& name, int64_t max_loras,
                          std::vector<std::pair<std::string, std::string>> packed = {}) {
    CompileOptions o;
    o.model_path = model_.string();
    o.output_path = (dir_ / name).string();
    o.quiet = true;
    o.limits.max_num_batched_tokens = 64;
    o.limits.max_num_seqs = 4;
    o.limits.max_model_len = 256;
    o.enable_lora = true;
    o.max_loras = max_loras;
    o.max_lora_rank = 8;
    o.lora_modules = std::move(packed);
    auto s = xcc::Compile(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return o.output_path;
  }

  std::string WriteConfig(const std::string& json) {
    std::string p = (dir_ / "serving.json").string();
    std::ofstream(p) << json;
    return p;
  }

  fs::path dir_, model_;
};

TEST_F(CheckTest, DefaultBucketsCoverTheirLimits) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 100, 12);  // buckets 16..128, req buckets 8, 12
  o.inputs = {model_.string()};
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
}

TEST_F(CheckTest, TokenBucketsBelowTheBudgetAreAGap) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {16, 32}, 32, 4);
  o.serving_config_path = WriteConfig(R"({"max-num-batched-tokens": 100})");
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 1u) << r->ToText();
  EXPECT_EQ(r->findings[0].kind, "coverage");
  EXPECT_THAT(r->findings[0].message, HasSubstr("num_tokens 33..100"));
  EXPECT_THAT(r->findings[0].message, HasSubstr("max_num_batched_tokens = 100"));
  EXPECT_THAT(r->findings[0].message, HasSubstr("largest compiled bucket 32"));
}

TEST_F(CheckTest, RaisingMaxNumSeqsIsAGap) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.serving_config_path = WriteConfig(R"({"max_num_seqs": 10})");
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->findings.empty());
  EXPECT_THAT(r->ToText(), HasSubstr("max_num_seqs 10 exceeds the 4 request rows"));
  EXPECT_THAT(r->ToText(), HasSubstr("5..10"));
}

TEST_F(CheckTest, OneChangedByteMakesTheArtifactStale) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.inputs = {model_.string()};
  ExpectStaleAfterFlip(o, model_ / "model.safetensors", "model.safetensors changed");
}

TEST_F(CheckTest, AddedOrRemovedInputsAreStale) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.inputs = {model_.string()};
  fs::remove(model_ / "generation_config.json");
  std::ofstream(model_ / "extra.safetensors") << "x";
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->ToText(),
              HasSubstr("generation_config.json (generation_config) is no longer present"));
  EXPECT_THAT(r->ToText(), HasSubstr("extra.safetensors was not an input"));
}

TEST_F(CheckTest, VerifyWeightsFindsAFlippedWeightByte) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.verify_weights = true;
  auto clean = RunCheck(o);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->findings.empty()) << clean->ToText();
  EXPECT_THAT(clean->ToText(), HasSubstr("recomputed the checksums of 1 weights segment(s)"));
  EXPECT_THAT(clean->ToText(), HasSubstr("(code): checksum verified when the artifact was opened"));

  const uint32_t index = SegmentOfKind(o.artifact_path, xpk::SegmentKind::weights);
  std::vector<uint8_t> bytes = ReadBytes(o.artifact_path);
  const xpk::Segment* seg = ManifestOf(bytes)->segments()->Get(index);
  const uint64_t begin = seg->offset(), end = seg->offset() + seg->size();
  const std::string expected = xrt::HexDigest(seg->checksum()->data(), seg->checksum()->size());
  FlipByte(o.artifact_path, begin + seg->size() / 2);
  bytes = ReadBytes(o.artifact_path);
  const xrt::Xxh3_128Digest actual = xrt::ComputeXxh3_128(bytes.data() + begin, end - begin);

  ExpectOneFinding(RunCheck(o), "integrity",
                   fmt::format("{}: segment {} (weights): checksum mismatch, the bytes [{}, {}) "
                               "are corrupt: expected xxh3_128 {}, actual {}",
                               o.artifact_path, index, begin, end, expected,
                               xrt::HexDigest(actual.data(), actual.size())));
  // Without the flag the weights are not read.
  o.verify_weights = false;
  auto unchecked = RunCheck(o);
  ASSERT_TRUE(unchecked.ok());
  EXPECT_TRUE(unchecked->findings.empty()) << unchecked->ToText();
}

TEST_F(CheckTest, CorruptCodeCannotBeChecked) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  const uint32_t index = SegmentOfKind(o.artifact_path, xpk::SegmentKind::code);
  std::vector<uint8_t> bytes = ReadBytes(o.artifact_path);
  FlipByte(o.artifact_path, ManifestOf(bytes)->segments()->Get(index)->offset() + 100);
  auto r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr(fmt::format("segment {} (code): checksum mismatch", index)));
}

// The format minor in the file header, rewritten in place.
void SetFormatMinor(const std::string& path, uint32_t minor) {
  std::vector<uint8_t> bytes = ReadBytes(path);
  std::memcpy(bytes.data() + 12, &minor, 4);  // FileHeader: magic, major, minor (little-endian)
  WriteBytes(path, bytes);
}

TEST_F(CheckTest, AnotherFormatMinorIsStale) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  auto fresh = RunCheck(o);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE(fresh->findings.empty()) << fresh->ToText();
  SetFormatMinor(o.artifact_path, xrt::kXpkFormatMinor - 1);
  ExpectOneFinding(RunCheck(o), "stale",
                   fmt::format("written in artifact format 1.{}, this xcc writes 1.{} (the changes "
                               "are listed in schemas/artifact.fbs): recompile",
                               xrt::kXpkFormatMinor - 1, xrt::kXpkFormatMinor));
  SetFormatMinor(o.artifact_path, xrt::kXpkFormatMinor + 1);
  ExpectOneFinding(RunCheck(o), "stale",
                   fmt::format("written in artifact format 1.{} by a newer xcc, this one writes "
                               "1.{}: check it with the xcc that wrote it, or recompile",
                               xrt::kXpkFormatMinor + 1, xrt::kXpkFormatMinor));
}

TEST_F(CheckTest, Format10ArtifactWithoutChecksumsIsAFinding) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  std::vector<uint8_t> bytes = ReadBytes(o.artifact_path);
  StripSegmentChecksums(bytes, 0);
  WriteBytes(o.artifact_path, bytes);
  const uint32_t code = SegmentOfKind(o.artifact_path, xpk::SegmentKind::code);
  const uint32_t weights = SegmentOfKind(o.artifact_path, xpk::SegmentKind::weights);
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 2u) << r->ToText();
  EXPECT_THAT(r->ToText(),
              HasSubstr(fmt::format("FAIL [integrity] segment {} (code) has no checksum "
                                    "(artifact format 1.0): its code is loaded unverified; "
                                    "recompile",
                                    code)));
  EXPECT_THAT(r->ToText(), HasSubstr("written in artifact format 1.0, this xcc writes"));
  o.verify_weights = true;
  r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 3u) << r->ToText();
  EXPECT_THAT(r->ToText(),
              HasSubstr(fmt::format("FAIL [integrity] segment {} (weights) has no checksum "
                                    "(artifact format 1.0): its bytes cannot be verified; "
                                    "recompile",
                                    weights)));
}

TEST_F(CheckTest, BadServingConfigCannotRun) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.serving_config_path = WriteConfig(R"({"max-num-seq": 10})");
  auto r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("unknown key 'max-num-seq'"));
  o.serving_config_path = (dir_ / "missing.json").string();
  EXPECT_FALSE(RunCheck(o).ok());
}

TEST_F(CheckTest, EveryImageCountAStepCanEncodeHasAVisionEncodeBucket) {
  CheckOptions o;
  o.artifact_path = CompileLlava("default.xpk", {});  // buckets 1, 2, 4
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
  EXPECT_EQ(r->vision_encode_buckets, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(r->images_per_step, 4);
  EXPECT_THAT(r->ToText(), HasSubstr("checked num_images 1..4 through InputBuilder"));
  EXPECT_EQ(r->ToJson()["vision_encode"].dump(), R"({"buckets":[1,2,4],"images_per_step":4})");
}

TEST_F(CheckTest, AMissingVisionEncodeBucketIsAFinding) {
  // The engine caps a step's images at the largest bucket (1), which hides the gap.
  CheckOptions o;
  o.artifact_path = CompileLlava("one.xpk", {1});
  ExpectOneFinding(
      RunCheck(o), "coverage",
      "num_images 2..4: no vision_encode bucket holds these steps (largest compiled bucket 1; "
      "encoder budget max(max_num_batched_tokens = 64, 16) / 16 tokens per image = 4 images): "
      "recompile with --image-buckets 1,2,4 (any list up to 4) or a lower "
      "--max-num-batched-tokens");
  // Served at a budget of 32 tokens a step encodes at most 2 images.
  o.serving_config_path = WriteConfig(R"({"max-num-batched-tokens": 32})");
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 1u) << r->ToText();
  EXPECT_THAT(r->findings[0].message, HasSubstr("num_images 2: no vision_encode bucket"));
  // One request of one image at a time: one image per step, which bucket 1 holds.
  o.serving_config_path =
      WriteConfig(R"({"max_num_seqs": 1, "limit_mm_per_prompt": {"image": 1}})");
  r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
  EXPECT_THAT(r->ToText(), HasSubstr("max_num_seqs x limit_mm_per_prompt = 1 images"));
}

TEST_F(CheckTest, MoreImagesPerPromptThanCompiledIsAFinding) {
  CheckOptions o;
  o.artifact_path = CompileLlava("a.xpk", {});  // --limit-mm-per-prompt 8 (the default)
  o.serving_config_path = WriteConfig(R"({"limit-mm-per-prompt": 10})");
  ExpectOneFinding(RunCheck(o), "coverage",
                   "limit_mm_per_prompt 10 exceeds the 8 images per prompt the artifact was "
                   "compiled for: recompile with --limit-mm-per-prompt 10");
  o.serving_config_path = WriteConfig(R"({"limit-mm-per-prompt": {"video": 1}})");
  auto bad = RunCheck(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("modality 'video' is not supported"));
  // A text-only model serves no images.
  o.artifact_path = Compile("text.xpk", {}, 64, 4);
  o.serving_config_path = WriteConfig(R"({"limit_mm_per_prompt": 2})");
  ExpectOneFinding(RunCheck(o), "coverage",
                   "limit_mm_per_prompt 2: the artifact has no vision encoder (a text-only "
                   "model serves no images)");
}

TEST_F(CheckTest, AnEncoderCacheSmallerThanOneImageIsAFinding) {
  CheckOptions o;
  o.artifact_path = CompileLlava("a.xpk", {});
  std::vector<uint8_t> bytes = ReadBytes(o.artifact_path);
  const xpk::VisionConfig* vision = ManifestOf(bytes)->config()->vision();
  Poke<int64_t>(FieldAddr(vision, xpk::VisionConfig::VT_ENCODER_CACHE_ROWS), 15);
  WriteBytes(o.artifact_path, bytes);
  ExpectOneFinding(RunCheck(o), "coverage",
                   "the encoder cache of 15 rows is smaller than one image (16 tokens per "
                   "image): no image can be encoded; recompile with --encoder-cache-size 16 or "
                   "more (0: automatic)");
}

// tests/fixtures/traces/images.jsonl: 9 distinct images in 7 requests (see the
// file); the encoder cache holds 5 (80 rows).
TEST_F(CheckTest, ReplayOfATraceWithImagesReportsEncoderWork) {
  const std::string trace =
      (fs::path(XCC_SOURCE_DIR) / "tests/fixtures/traces/images.jsonl").string();
  CheckOptions o;
  o.artifact_path = CompileLlava("a.xpk", {});
  o.trace_path = trace;
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
  // "cat" is encoded once for the two requests of the first step (a pending
  // entry shared, not a hit); "f" is still cached when the fifth request comes
  // (a hit); 9 images in 5 slots evict 4.
  EXPECT_EQ(r->replay_images_encoded, 9);
  EXPECT_EQ(r->replay_encoder_cache_hits, 1);
  EXPECT_EQ(r->replay_encoder_cache_misses, 9);
  EXPECT_EQ(r->replay_encoder_cache_evictions, 4);
  EXPECT_THAT(r->ToText(),
              HasSubstr("replay images: 9 encoded; encoder cache 1 hits, 9 misses, 4 evictions"));
  const nlohmann::ordered_json j = r->ToJson()["replay"];
  EXPECT_EQ(j["images_encoded"], 9);
  EXPECT_EQ(j["encoder_cache"].dump(), R"({"hits":1,"misses":9,"evictions":4})");
  int64_t encoded = 0;
  for (const auto& [exe, n] : r->replay_bucket_hits)
    if (exe.rfind("vision_encode_i", 0) == 0)
      encoded += n * std::stoll(exe.substr(15)) - r->replay_padding.at(exe);
  EXPECT_EQ(encoded, 9);

  // The six images of requests 3 and 4 (arriving together) exceed one step's
  // budget of four: they are spread over steps, none encoding more than four.
  xrt::ReplayReport rep;
  ASSERT_NO_FATAL_FAILURE(ReplayAsChecked(o.artifact_path, "", trace, &rep));
  int64_t steps_with_images = 0, total = 0;
  for (int64_t n : rep.step_images) {
    EXPECT_LE(n, 4);
    steps_with_images += n > 0;
    total += n;
  }
  EXPECT_EQ(total, 9);
  EXPECT_GE(steps_with_images, 3);
  EXPECT_EQ(rep.step_images[0], 2);  // cat (once) and "a"; the step's tokens end there
}

TEST_F(CheckTest, TraceImagesOfTheWrongLengthCannotRun) {
  CheckOptions o;
  o.artifact_path = CompileLlava("a.xpk", {});
  o.trace_path = (dir_ / "t.jsonl").string();
  std::ofstream(o.trace_path)
      << R"({"prompt_len": 4, "max_tokens": 1})"
         "\n"
      << R"({"prompt_len": 4, "max_tokens": 1, "images": [{"tokens": 576}]})"
         "\n";
  auto r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), o.trace_path +
                                      ":2: 'images[0].tokens' is 576, but the artifact's images "
                                      "have 16 tokens (tokens_per_image)");
  // A text-only artifact takes no images.
  o.artifact_path = Compile("text.xpk", {}, 64, 4);
  r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            o.trace_path + ":2: 'images': the artifact has no vision encoder");
}

fs::path LoraTrace() { return fs::path(XCC_SOURCE_DIR) / "tests/fixtures/traces/lora.jsonl"; }

// Moves the executable named `name` to bucket `num_tokens` in place: its bucket
// loses that variant.
void MoveExecutable(const std::string& path, const std::string& name, int64_t num_tokens) {
  std::vector<uint8_t> bytes = ReadBytes(path);
  bool found = false;
  for (const xpk::Executable* e : *ManifestOf(bytes)->executables())
    if (e->name()->str() == name) {
      Poke<int64_t>(FieldAddr(e, xpk::Executable::VT_NUM_TOKENS), num_tokens);
      found = true;
    }
  ASSERT_TRUE(found) << name;
  WriteBytes(path, bytes);
}

TEST_F(CheckTest, EveryBucketHasItsLoraVariants) {
  CheckOptions o;
  o.artifact_path = CompileLora("l.xpk", 2);
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
  EXPECT_THAT(r->ToText(), HasSubstr("LoRA: 2 slots of rank 8 on [q_proj,k_proj,v_proj,o_proj,"
                                     "gate_proj,up_proj,down_proj] (14 targets), 0 packed "
                                     "adapters; served at max_loras 2, max_lora_rank 8"));
  EXPECT_THAT(r->ToText(),
              HasSubstr("checked the LoRA variants (single, mixed) of num_tokens 1..64"));
}

TEST_F(CheckTest, AMissingLoraVariantIsAFindingNamingBucketAndMode) {
  CheckOptions o;
  o.artifact_path = CompileLora("l.xpk", 2);
  MoveExecutable(o.artifact_path, "lm_step_t32_mixed", 4096);
  ExpectOneFinding(RunCheck(o), "coverage",
                   "lm_step bucket 32 has no mixed LoRA variant (lm_step_t32_mixed): steps of "
                   "17..32 tokens with several adapters, or an adapter and the base model, cannot "
                   "run; recompile with xcc compile --enable-lora --max-loras 2 --max-lora-rank 8");
  MoveExecutable(o.artifact_path, "lm_step_t16_single", 4097);
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 2u) << r->ToText();
  EXPECT_THAT(r->findings[0].message,
              HasSubstr("lm_step bucket 16 has no single LoRA variant (lm_step_t16_single): steps "
                        "of 1..16 tokens with one adapter for every token cannot run"));
  // One request per step never mixes: only the single variant is needed.
  o.serving_config_path = WriteConfig(R"({"max_num_seqs": 1})");
  r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 1u) << r->ToText();
  EXPECT_THAT(r->findings[0].message, HasSubstr("(lm_step_t16_single)"));
  // Served without LoRA, the variants are not needed.
  o.serving_config_path = WriteConfig(R"({"enable-lora": false})");
  r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
  EXPECT_THAT(r->ToText(), HasSubstr("serving config sets enable-lora false"));

  // A trace step that needs the missing variant fails as on the server.
  o.serving_config_path.clear();
  o.trace_path = LoraTrace().string();
  r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(r->ToText(), HasSubstr("no lm_step executable lm_step_t16_single (16 tokens, LoRA "
                                     "mode single)"));
}

TEST_F(CheckTest, ServingMoreLoraThanCompiledIsAFinding) {
  CheckOptions o;
  o.artifact_path = Compile("text.xpk", {}, 64, 4);
  o.serving_config_path = WriteConfig(R"({"max-loras": 4})");
  ExpectOneFinding(RunCheck(o), "coverage",
                   "the serving config enables LoRA (max_loras 4, max_lora_rank 16), but the "
                   "artifact was compiled without LoRA: recompile with xcc compile --enable-lora "
                   "--max-loras 4 --max-lora-rank 16");
  o.serving_config_path = WriteConfig(R"({"enable_lora": true})");
  ExpectOneFinding(RunCheck(o), "coverage",
                   "the serving config enables LoRA (max_loras 1, max_lora_rank 16), but the "
                   "artifact was compiled without LoRA: recompile with xcc compile --enable-lora "
                   "--max-loras 1 --max-lora-rank 16");

  o.artifact_path = CompileLora("l.xpk", 2);
  o.serving_config_path = WriteConfig(R"({"max_loras": 3, "max-lora-rank": 16})");
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 2u) << r->ToText();
  EXPECT_EQ(r->findings[0].message,
            "max_loras 3 exceeds the 2 adapter slots the artifact was compiled with (the most "
            "distinct adapters one batch can hold): recompile with xcc compile --enable-lora "
            "--max-loras 3 --max-lora-rank 16");
  EXPECT_EQ(r->findings[1].message,
            "max_lora_rank 16 exceeds the rank 8 the artifact was compiled for (adapters of a "
            "higher rank cannot be loaded): recompile with xcc compile --enable-lora --max-loras 3 "
            "--max-lora-rank 16");
  // Fewer adapters and a lower rank than compiled are fine.
  o.serving_config_path = WriteConfig(R"({"max_loras": 1, "max_lora_rank": 4})");
  r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();

  for (const auto& [json, error] : std::vector<std::pair<std::string, std::string>>{
           {R"({"enable-lora": false, "max-loras": 2})",
            "'max-loras' needs LoRA, but enable-lora is false"},
           {R"({"enable_lora": 1})", "'enable_lora' must be true or false"},
           {R"({"max_lora_rank": 0})", "'max_lora_rank' must be a positive integer"}}) {
    o.serving_config_path = WriteConfig(json);
    auto bad = RunCheck(o);
    ASSERT_FALSE(bad.ok()) << json;
    EXPECT_THAT(bad.status().message(), HasSubstr(error));
  }
}

TEST_F(CheckTest, AChangedPackedAdapterIsStale) {
  const fs::path a = dir_ / "adapters" / "a_all_r8", b = dir_ / "adapters" / "b_qv_r4_rslora";
  fs::create_directories(dir_ / "adapters");
  for (const fs::path& p : {a, b})
    fs::copy(fs::path(XCC_SOURCE_DIR) / "tests/fixtures/lora/llama_gqa" / p.filename(), p);
  CheckOptions o;
  o.artifact_path = CompileLora("l.xpk", 2, {{"a", a.string()}, {"b", b.string()}});
  // By name, or by a directory named as the packed one.
  o.inputs = {model_.string(), "a=" + a.string(), b.string() + "/"};
  auto fresh = RunCheck(o);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_THAT(fresh->ToText(), HasSubstr("re-hashed 9 inputs: 9 unchanged"));
  const fs::path weights = b / "adapter_model.safetensors";
  ExpectStaleAfterFlip(o, weights, "input " + weights.string() + " changed: ");

  // An adapter not given is missing, with how to give it.
  o.inputs = {model_.string(), "a=" + a.string()};
  auto stale = RunCheck(o);
  ASSERT_TRUE(stale.ok());
  ASSERT_EQ(stale->findings.size(), 2u) << stale->ToText();
  EXPECT_EQ(stale->findings[0].message,
            "input b/adapter_config.json (adapter) is no longer present (give adapter b's "
            "directory as --inputs b=DIR)");
  // Names and directories that match no packed adapter cannot be checked.
  o.inputs = {"c=" + a.string()};
  auto bad = RunCheck(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--inputs c=" + a.string() + ": the artifact has no packed adapter 'c' (packed: a, b)");
  const fs::path other = dir_ / "other";
  fs::copy(a, other);
  o.inputs = {other.string()};
  bad = RunCheck(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("give it as NAME=DIR (packed: a, b)"));
}

// tests/fixtures/traces/lora.jsonl: the base model and adapters alpha, beta,
// gamma; four requests at once (three adapters), then alpha alone, the base
// model alone, and beta and gamma on the same prompt.
TEST_F(CheckTest, ReplayOfATraceWithAdaptersReportsStepsPerLoraMode) {
  CheckOptions o;
  o.artifact_path = CompileLora("l.xpk", 2);
  o.trace_path = LoraTrace().string();
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
  for (const char* mode : {"none", "single", "mixed"})
    EXPECT_GT(r->replay_lora_mode_steps[mode], 0) << mode;
  int64_t lm_steps = 0;
  std::map<std::string, int64_t> by_suffix;
  for (const auto& [exe, n] : r->replay_bucket_hits) {
    if (exe.rfind("lm_step_", 0) != 0) continue;
    lm_steps += n;
    by_suffix[exe.find("_single") != std::string::npos  ? "single"
              : exe.find("_mixed") != std::string::npos ? "mixed"
                                                        : "none"] += n;
  }
  EXPECT_EQ(by_suffix, r->replay_lora_mode_steps);
  // alpha and beta load into the two slots; gamma waits (strict FCFS) and
  // replaces one; alpha comes back alone; beta and gamma together: one of
  // them is still resident.
  EXPECT_EQ(r->replay_lora_loads, 5);
  EXPECT_EQ(r->replay_lora_swaps, 3);
  const nlohmann::ordered_json j = r->ToJson()["replay"]["lora"];
  EXPECT_EQ(j["steps_by_mode"]["none"].get<int64_t>() +
                j["steps_by_mode"]["single"].get<int64_t>() +
                j["steps_by_mode"]["mixed"].get<int64_t>(),
            lm_steps);
  EXPECT_EQ(j["loads"], 5);
  EXPECT_THAT(r->ToText(), HasSubstr("replay LoRA: steps by lm_step variant: "));

  // The scheduler holds at most max_loras distinct adapters per step: as
  // compiled (2), or as served (1).
  for (int64_t served : {2, 1}) {
    xrt::ReplayReport rep;
    ASSERT_NO_FATAL_FAILURE(
        ReplayAsChecked(o.artifact_path, WriteConfig(fmt::format(R"({{"max_loras": {}}})", served)),
                        o.trace_path, &rep));
    EXPECT_TRUE(rep.unbucketed.empty());
    EXPECT_EQ(*std::max_element(rep.step_lora_adapters.begin(), rep.step_lora_adapters.end()),
              served);
    EXPECT_GT(rep.lora_mode_steps["mixed"], 0);  // an adapter beside the base model
  }
}

TEST_F(CheckTest, TraceAdaptersOnAnArtifactWithoutLoraCannotRun) {
  CheckOptions o;
  o.artifact_path = Compile("text.xpk", {}, 64, 4);
  o.trace_path = LoraTrace().string();
  auto r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            o.trace_path +
                ":2: 'lora' names adapter 'alpha', but the artifact was compiled without LoRA "
                "(xcc compile --enable-lora)");
  o.artifact_path = CompileLora("l.xpk", 2);
  o.serving_config_path = WriteConfig(R"({"enable_lora": false})");
  r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), o.trace_path +
                                      ":2: 'lora' names adapter 'alpha', but the serving config "
                                      "sets enable-lora false");
}

}  // namespace
}  // namespace xcc
