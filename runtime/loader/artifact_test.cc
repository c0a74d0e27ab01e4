// ArtifactWriter + xrt::Artifact: a small fake artifact is written, loaded, compared,
// then corrupted in many ways; every corruption must be a clean error naming the
// problem (or, for harmless byte flips, a successful load) and never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "compiler/artifact/artifact_patch_for_tests.h"
#include "compiler/artifact/artifact_writer.h"
#include "compiler/artifact/sha256.h"
#include "compiler/artifact/tokenizer_spec_writer.h"
#include "runtime/executor/code_module.h"
#include "runtime/loader/artifact.h"
#include "runtime/loader/file_header.h"
#include "runtime/loader/manifest_printer.h"
#include "runtime/loader/segment_checksum.h"
#include "runtime/loader/tokenizer_spec_reader.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

namespace xcc {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kLayers = 2;
constexpr int64_t kVocab = 8;
constexpr int64_t kHidden = 16;

xrt::TokenizerSpec FakeTokenizer() {
  xrt::TokenizerSpec t;
  t.model = "bpe";
  t.vocab = {"<s>", "</s>", "a", "b", "ab", "Ġ", "Ġab", ""};
  t.merges = {{"a", "b"}, {"Ġ", "ab"}};
  xrt::AddedToken bos;
  bos.id = 0;
  bos.content = "<s>";
  bos.special = true;
  xrt::AddedToken eos;
  eos.id = 1;
  eos.content = "</s>";
  eos.special = true;
  eos.rstrip = true;
  t.added_tokens = {bos, eos};
  t.normalizer = "nfc";
  t.split_regexes = {"\\s+|\\S+", "\\p{N}"};
  t.individual_digits = true;
  t.add_prefix_space = true;
  t.ignore_merges = true;
  t.bos_id = 0;
  t.eos_id = 1;
  t.pad_id = 7;
  t.add_bos = true;
  return t;
}

// Knobs for building deliberately broken manifests (written with validate = false).
struct FakeParams {
  uint32_t format_major = xrt::kXpkFormatMajor;
  bool with_tokenizer = true;
  int64_t max_blocks_per_req = 4;  // max_model_len 64 / block_size 16
  uint64_t arena_size = 4096;
  uint64_t arena_binding_offset = 0;
  xpk::Ukernel matmul_ukernel = xpk::Ukernel::matmul;
  uint32_t matmul_iparams = 8;
  xpk::ComputeType matmul_compute = xpk::ComputeType::f32;
  xpk::ComputeType dispatch_compute = xpk::ComputeType::f32;
  uint32_t dispatch_function = 1;
  uint32_t kv_layer = 1;
  std::string second_executable_name = "lm_logits_r4";
};

struct FakeInputs {
  std::vector<uint8_t> embed;    // f32 [8, 16] row-major
  std::vector<uint8_t> lm_head;  // f32 [8, 16] packed_panels nr 16 -> padded to 16 rows
  std::vector<uint8_t> code;
};

FakeInputs MakeInputs() {
  FakeInputs in;
  in.embed.resize(kVocab * kHidden * 4);
  for (size_t i = 0; i < in.embed.size(); ++i) in.embed[i] = static_cast<uint8_t>(i * 7 + 1);
  in.lm_head.resize(16 * kHidden * 4);
  for (size_t i = 0; i < in.lm_head.size(); ++i) in.lm_head[i] = static_cast<uint8_t>(i * 3 + 5);
  in.code = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0xde, 0xad, 0xbe, 0xef};
  return in;
}

// A writer holding the fake segments plus the callback that builds the fake manifest.
struct Fake {
  FakeInputs inputs = MakeInputs();
  ArtifactWriter writer;
  WeightPlacement embed, lm_head;
  uint32_t code_segment = 0;
  FakeParams params;
  xrt::TokenizerSpec tokenizer = FakeTokenizer();

  explicit Fake(FakeParams p = {}) : params(std::move(p)) {
    embed = writer.AppendWeight(inputs.embed.data(), inputs.embed.size());
    lm_head = writer.AppendWeight(inputs.lm_head.data(), inputs.lm_head.size());
    code_segment = writer.AddSegment(xpk::SegmentKind::code, inputs.code).value();
  }

  ManifestBuildFn Builder() const {
    return [this](flatbuffers::FlatBufferBuilder& fbb,
                  SegmentTable segments) -> Expected<flatbuffers::Offset<xpk::Manifest>> {
      const FakeParams& p = params;
      // Store every scalar, so tests can patch any field in place.
      fbb.ForceDefaults(true);
      std::vector<int32_t> eos = {1};
      auto rope = xpk::CreateRopeScalingDirect(fbb, "none", 1.0, 1.0, 1.0, 0);
      auto config = xpk::CreateModelConfigDirect(
          fbb, "LlamaForCausalLM", kVocab, kHidden, 32, kLayers, 2, 1, 8, 64, 1e-5, 10000.0, rope,
          /*tie_word_embeddings=*/false, false, "{{ messages }}", &eos);
      flatbuffers::Offset<xpk::Tokenizer> tok = 0;
      if (p.with_tokenizer) tok = BuildTokenizer(fbb, tokenizer);
      auto limits = xpk::CreateServingLimits(fbb, 4, 64, 64, 16, p.max_blocks_per_req, 0, 0, 0);

      std::vector<int64_t> shape = {kVocab, kHidden};
      std::vector<flatbuffers::Offset<xpk::Weight>> weights = {
          xpk::CreateWeightDirect(fbb, "model.embed_tokens.weight", xpk::DType::f32, &shape,
                                  xpk::WeightLayout::row_major, 0, embed.segment, embed.offset,
                                  embed.size),
          xpk::CreateWeightDirect(fbb, "lm_head.weight", xpk::DType::f32, &shape,
                                  xpk::WeightLayout::packed_panels, 16, lm_head.segment,
                                  lm_head.offset, lm_head.size),
      };

      std::vector<flatbuffers::Offset<flatbuffers::String>> funcs = {
          fbb.CreateString("xcc_dispatch_0"), fbb.CreateString("xcc_dispatch_1")};
      std::vector<flatbuffers::Offset<flatbuffers::String>> req = {fbb.CreateString("avx2")};
      std::vector<flatbuffers::Offset<xpk::CodeModule>> code = {
          xpk::CreateCodeModuleDirect(fbb, "x86_64-unknown-linux-gnu", "x86-64-v3", "+avx2,+fma",
                                      &req, code_segment, &funcs, 1)};

      // lm_step_t16: io = tokens i32[16] @0, positions i32[16] @64, hidden f32[16,16] @128.
      std::vector<int64_t> s16 = {16}, s16x16 = {16, 16};
      std::vector<flatbuffers::Offset<xpk::TensorSpec>> ins = {
          xpk::CreateTensorSpecDirect(fbb, "token_ids", xpk::DType::i32, &s16, 0, 64),
          xpk::CreateTensorSpecDirect(fbb, "positions", xpk::DType::i32, &s16, 64, 64)};
      std::vector<flatbuffers::Offset<xpk::TensorSpec>> outs = {
          xpk::CreateTensorSpecDirect(fbb, "hidden", xpk::DType::f32, &s16x16, 128, 1024)};
      std::vector<xpk::Binding> dispatch_bindings = {
          xpk::Binding(xpk::BindingKind::io, 0, 0, 64),
          xpk::Binding(xpk::BindingKind::weight, 0, 0, 0),
          xpk::Binding(xpk::BindingKind::kv_key, p.kv_layer, 0, 0),
          xpk::Binding(xpk::BindingKind::arena, 0, 0, 1024)};
      // lm_head: logits [16, 8] (io) = hidden [16, 16] (arena) · lm_head.weightᵀ.
      using MP = xpk::abi::MatmulParam;
      using MB = xpk::abi::MatmulBinding;
      xpk::abi::UkernelCommand<xpk::Ukernel::matmul, xpk::Binding> matmul;
      matmul.Bind(MB::kA, xpk::Binding(xpk::BindingKind::arena, 0, p.arena_binding_offset, 1024));
      matmul.Bind(MB::kW, xpk::Binding(xpk::BindingKind::weight, 1, 0, 0));
      matmul.Bind(MB::kC, xpk::Binding(xpk::BindingKind::io, 0, 128, 1024));
      for (auto [param, value] : {std::pair{MP::kM, 16},
                                  {MP::kN, 8},
                                  {MP::kK, 16},
                                  {MP::kLda, 16},
                                  {MP::kLdc, 8},
                                  {MP::kLdAcc, 8}})
        matmul.Set(param, value);
      std::vector<xpk::Binding> matmul_bindings;
      std::vector<int64_t> mm_iparams;
      std::vector<float> mm_fparams;
      EXPECT_EQ(matmul.Finish(&mm_iparams, &mm_fparams, &matmul_bindings), "");
      mm_iparams.resize(p.matmul_iparams, 1);
      std::vector<flatbuffers::Offset<xpk::Command>> commands = {
          xpk::CreateCommandDirect(fbb, xpk::CommandKind::dispatch, p.dispatch_function,
                                   xpk::Ukernel::none, 4, &dispatch_bindings, nullptr, nullptr,
                                   "layers.0.embed", false, p.dispatch_compute),
          xpk::CreateCommandDirect(fbb, xpk::CommandKind::ukernel, 0, p.matmul_ukernel, 0,
                                   &matmul_bindings, &mm_iparams, nullptr, "lm_head.matmul", false,
                                   p.matmul_compute),
      };
      std::vector<flatbuffers::Offset<xpk::Executable>> exes = {
          xpk::CreateExecutableDirect(fbb, "lm_step_t16", xpk::ExecutableKind::lm_step, 16, 4, 0,
                                      xpk::LoraMode::none, &ins, &outs, 1152, p.arena_size,
                                      &commands),
          xpk::CreateExecutableDirect(fbb, "lm_step_t32", xpk::ExecutableKind::lm_step, 32, 4, 0,
                                      xpk::LoraMode::none, nullptr, nullptr, 0, 0, nullptr),
          xpk::CreateExecutableDirect(fbb, p.second_executable_name.c_str(),
                                      xpk::ExecutableKind::lm_logits, 0, 4, 0, xpk::LoraMode::none,
                                      nullptr, nullptr, 0, 0, nullptr),
      };

      xrt::ArtifactProvenance prov;
      prov.compiler_version = "xcc test";
      prov.llvm_version = "19.1.7";
      prov.options = {{"target", "host"}, {"buckets", "16,32"}};
      prov.inputs = {{"model/model.safetensors", "weights", 1234, std::string(64, 'a')},
                     {"model/config.json", "config", 56, std::string(64, 'b')}};
      auto provenance = BuildProvenance(fbb, prov);

      auto weights_vec = fbb.CreateVector(weights);
      auto code_vec = fbb.CreateVector(code);
      auto exes_vec = fbb.CreateVector(exes);
      return xpk::CreateManifest(fbb, p.format_major, xrt::kXpkFormatMinor, config, tok, limits,
                                 segments, weights_vec, code_vec, exes_vec, provenance);
    };
  }

  std::vector<uint8_t> Bytes(bool validate = true) const {
    ArtifactWriteOptions o;
    o.validate = validate;
    auto bytes = writer.WriteToBytes(Builder(), o, "model.xpk");
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    return bytes.ok() ? *bytes : std::vector<uint8_t>();
  }
};

xrt::Expected<std::unique_ptr<xrt::Artifact>> Load(const std::vector<uint8_t>& bytes) {
  return xrt::Artifact::FromBytes("model.xpk", bytes.data(), bytes.size());
}

std::string LoadError(const std::vector<uint8_t>& bytes) {
  auto a = Load(bytes);
  if (a.ok()) return "<loaded fine>";
  return a.status().message();
}

std::string Hex(const xrt::Xxh3_128Digest& d) { return xrt::HexDigest(d.data(), d.size()); }

// The XXH3-128 of segment `index`'s bytes inside `bytes` (a whole artifact).
xrt::Xxh3_128Digest SegmentDigest(std::vector<uint8_t>& bytes, uint32_t index) {
  const xpk::Segment* s = ManifestOf(bytes)->segments()->Get(index);
  return xrt::ComputeXxh3_128(bytes.data() + s->offset(), s->size());
}

std::string StoredChecksumHex(std::vector<uint8_t>& bytes, uint32_t index) {
  const auto* c = ManifestOf(bytes)->segments()->Get(index)->checksum();
  return c ? xrt::HexDigest(c->data(), c->size()) : "";
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Exercises everything a successfully loaded artifact promises is in bounds.
uint64_t TouchEverything(const xrt::Artifact& a) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < a.num_weights(); ++i) {
    auto d = a.weight_data(i);
    EXPECT_TRUE(d.ok());
    for (uint64_t k = 0; k < d->size; ++k) sum += d->data[k];
  }
  for (uint32_t i = 0; i < a.num_segments(); ++i) {
    auto d = a.segment_data(i);
    EXPECT_TRUE(d.ok());
    if (d->size > 0) sum += d->data[0] + d->data[d->size - 1];
  }
  sum += xrt::ManifestToText(a).size();
  sum += xrt::ManifestToJson(a).dump().size();
  auto spec = a.tokenizer_spec();
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return sum;
}

// ---- tokenizer -----------------------------------------------------------------------

// Writes `in` as a manifest Tokenizer table, verifies the buffer, reads it back.
xrt::Expected<xrt::TokenizerSpec> RoundTripTokenizer(const xrt::TokenizerSpec& in,
                                                     int64_t config_vocab_size) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(BuildTokenizer(fbb, in));
  flatbuffers::Verifier v(fbb.GetBufferPointer(), fbb.GetSize());
  if (!v.VerifyBuffer<xpk::Tokenizer>(nullptr)) return xrt::DataLossError("verifier failed");
  return xrt::TokenizerSpecFromManifest(
      *flatbuffers::GetRoot<xpk::Tokenizer>(fbb.GetBufferPointer()), config_vocab_size);
}

TEST(TokenizerSpec, RoundTrip) {
  xrt::TokenizerSpec in = FakeTokenizer();
  auto out = RoundTripTokenizer(in, kVocab);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->model, in.model);
  EXPECT_EQ(out->vocab, in.vocab);
  EXPECT_EQ(out->merges, in.merges);
  ASSERT_EQ(out->added_tokens.size(), 2u);
  EXPECT_EQ(out->added_tokens[1].content, "</s>");
  EXPECT_EQ(out->added_tokens[1].id, 1);
  EXPECT_TRUE(out->added_tokens[1].special);
  EXPECT_TRUE(out->added_tokens[1].rstrip);
  EXPECT_FALSE(out->added_tokens[1].lstrip);
  EXPECT_EQ(out->normalizer, "nfc");
  EXPECT_EQ(out->split_regexes, in.split_regexes);
  EXPECT_TRUE(out->individual_digits);
  EXPECT_TRUE(out->add_prefix_space);
  EXPECT_TRUE(out->ignore_merges);
  EXPECT_EQ(out->bos_id, 0);
  EXPECT_EQ(out->eos_id, 1);
  EXPECT_EQ(out->pad_id, 7);
  EXPECT_EQ(out->unk_id, -1);
  EXPECT_TRUE(out->add_bos);
  EXPECT_FALSE(out->add_eos);
  // Not stored (the default), as in a format 1.1 manifest: reads as byte-level.
  EXPECT_TRUE(out->byte_level);
  EXPECT_TRUE(out->decoders.empty());
}

TEST(TokenizerSpec, RoundTripSentencePiece) {
  xrt::TokenizerSpec in;
  in.vocab = {"<unk>", "<s>", "\u2581a", "<0x0A>"};
  in.byte_level = false;
  in.byte_fallback = true;
  in.fuse_unk = true;
  in.unk_id = 0;
  in.normalizer_steps = {{"prepend", "", "\u2581"}, {"replace", " ", "\u2581"}};
  in.metaspace = true;
  in.metaspace_replacement = "\u2581";
  in.metaspace_prepend_scheme = "first";
  in.metaspace_split = false;
  in.decoders = {{"replace", "\u2581", " ", 0, ""},
                 {"byte_fallback", "", "", 0, ""},
                 {"fuse", "", "", 0, ""},
                 {"strip", "", " ", 1, ""},
                 {"metaspace", "", "\u2581", 0, "never"}};
  auto out = RoundTripTokenizer(in, 4);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_FALSE(out->byte_level);
  EXPECT_TRUE(out->byte_fallback);
  EXPECT_TRUE(out->fuse_unk);
  ASSERT_EQ(out->normalizer_steps.size(), 2u);
  EXPECT_EQ(out->normalizer_steps[0].type, "prepend");
  EXPECT_EQ(out->normalizer_steps[0].content, "\u2581");
  EXPECT_EQ(out->normalizer_steps[1].type, "replace");
  EXPECT_EQ(out->normalizer_steps[1].pattern, " ");
  EXPECT_TRUE(out->metaspace);
  EXPECT_EQ(out->metaspace_replacement, "\u2581");
  EXPECT_EQ(out->metaspace_prepend_scheme, "first");
  EXPECT_FALSE(out->metaspace_split);
  ASSERT_EQ(out->decoders.size(), 5u);
  for (size_t i = 0; i < in.decoders.size(); ++i) {
    EXPECT_EQ(out->decoders[i].type, in.decoders[i].type) << i;
    EXPECT_EQ(out->decoders[i].pattern, in.decoders[i].pattern) << i;
    EXPECT_EQ(out->decoders[i].content, in.decoders[i].content) << i;
    EXPECT_EQ(out->decoders[i].start, in.decoders[i].start) << i;
    EXPECT_EQ(out->decoders[i].prepend_scheme, in.decoders[i].prepend_scheme) << i;
  }
}

TEST(TokenizerSpec, InvalidIds) {
  xrt::TokenizerSpec in = FakeTokenizer();
  in.eos_id = 99;
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(BuildTokenizer(fbb, in));
  auto out = xrt::TokenizerSpecFromManifest(
      *flatbuffers::GetRoot<xpk::Tokenizer>(fbb.GetBufferPointer()), kVocab);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "tokenizer: eos_id 99 is outside [-1, 8)");
}

// ---- sha256 --------------------------------------------------------------------------

TEST(Sha256, KnownVectorsAndFile) {
  EXPECT_EQ(*Sha256Bytes("", 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(*Sha256Bytes("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string path = ::testing::TempDir() + "/sha256_input.bin";
  std::string content(3 << 20, 'x');  // spans several read chunks
  content[12345] = 'y';
  {
    std::ofstream(path, std::ios::binary) << content;
  }
  auto f = Sha256File(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f, *Sha256Bytes(content.data(), content.size()));
  ::unlink(path.c_str());
  auto missing = Sha256File(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(path));
}

// ---- segment checksums ---------------------------------------------------------------

TEST(SegmentChecksum, Xxh3_128KnownVectors) {
  // Canonical big-endian digests, as `xxh128sum` prints them.
  EXPECT_EQ(Hex(xrt::ComputeXxh3_128("", 0)), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(Hex(xrt::ComputeXxh3_128("abc", 3)), "06b05ab6733a618578af5f94892f3950");
  const uint8_t bytes[] = {0x00, 0x0f, 0xa0, 0xff};
  EXPECT_EQ(xrt::HexDigest(bytes, sizeof(bytes)), "000fa0ff");
}

TEST(ArtifactIntegrity, EverySegmentCarriesItsChecksum) {
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  auto artifact = Load(bytes);
  ASSERT_TRUE(artifact.ok()) << artifact.status().ToString();
  EXPECT_GE((*artifact)->header().format_minor, xrt::kXpkFirstMinorWithChecksums);
  const xrt::Artifact& a = **artifact;
  ASSERT_EQ(a.num_segments(), 2u);
  for (uint32_t i = 0; i < a.num_segments(); ++i) {
    SCOPED_TRACE(i);
    const xpk::Segment* s = a.manifest().segments()->Get(i);
    EXPECT_EQ(s->checksum_algorithm(), xpk::ChecksumAlgorithm::xxh3_128);
    EXPECT_EQ(StoredChecksumHex(bytes, i), Hex(SegmentDigest(bytes, i)));
    Status v = a.VerifySegment(i);
    EXPECT_TRUE(v.ok()) << v.ToString();
  }
  // The code segment's digest is the digest of exactly the code the writer was given.
  EXPECT_EQ(StoredChecksumHex(bytes, fake.code_segment),
            Hex(xrt::ComputeXxh3_128(fake.inputs.code.data(), fake.inputs.code.size())));
  Status out_of_range = a.VerifySegment(2);
  EXPECT_EQ(out_of_range.code(), xrt::StatusCode::kOutOfRange);
}

TEST(ArtifactIntegrity, FlippedCodeByteIsRejectedAtLoad) {
  Fake fake;
  const std::vector<uint8_t> bytes = fake.Bytes();
  std::vector<uint8_t> copy = bytes;
  const xpk::Segment* code = ManifestOf(copy)->segments()->Get(fake.code_segment);
  const uint64_t begin = code->offset(), end = code->offset() + code->size();
  const std::string expected = StoredChecksumHex(copy, fake.code_segment);
  for (uint64_t pos : {begin, begin + 5, end - 1}) {
    SCOPED_TRACE(pos);
    std::vector<uint8_t> bad = bytes;
    bad[pos] ^= 0x01;
    const std::string actual = Hex(SegmentDigest(bad, fake.code_segment));
    ASSERT_NE(actual, expected);
    EXPECT_EQ(LoadError(bad),
              fmt::format("model.xpk: segment 1 (code): checksum mismatch, the bytes [{}, {}) are "
                          "corrupt: expected xxh3_128 {}, actual {}",
                          begin, end, expected, actual));
  }
}

TEST(ArtifactIntegrity, FlippedWeightByteIsFoundOnRequest) {
  Fake fake;
  std::vector<uint8_t> bad = fake.Bytes();
  const xpk::Segment* weights = ManifestOf(bad)->segments()->Get(0);
  const uint64_t begin = weights->offset(), end = weights->offset() + weights->size();
  const std::string expected = StoredChecksumHex(bad, 0);
  bad[begin + fake.lm_head.offset + 3] ^= 0x80;
  const std::string actual = Hex(SegmentDigest(bad, 0));
  // Weights are not hashed at open (that would read the whole file at every start).
  auto loaded = Load(bad);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Status v = (*loaded)->VerifySegment(0);
  EXPECT_EQ(v.code(), xrt::StatusCode::kDataLoss);
  EXPECT_EQ(v.message(),
            fmt::format("model.xpk: segment 0 (weights): checksum mismatch, the bytes [{}, {}) are "
                        "corrupt: expected xxh3_128 {}, actual {}",
                        begin, end, expected, actual));
  EXPECT_TRUE((*loaded)->VerifySegment(1).ok());
}

TEST(ArtifactIntegrity, MalformedChecksumFields) {
  Fake fake;
  const std::vector<uint8_t> bytes = fake.Bytes();
  auto code_segment = [&](std::vector<uint8_t>& b) {
    return ManifestOf(b)->segments()->Get(fake.code_segment);
  };
  std::vector<uint8_t> bad = bytes;
  Poke<uint8_t>(FieldAddr(code_segment(bad), xpk::Segment::VT_CHECKSUM_ALGORITHM), 7);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: segment 1 (code): unknown checksum algorithm 7 (this runtime knows "
            "xxh3_128)");
  bad = bytes;
  Poke<uint8_t>(FieldAddr(code_segment(bad), xpk::Segment::VT_CHECKSUM_ALGORITHM), 0);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: segment 1 (code): 16 checksum bytes but no checksum algorithm");
  bad = bytes;  // the digest vector's length field precedes its bytes
  Poke<uint32_t>(code_segment(bad)->checksum()->data() - 4, 8);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: segment 1 (code): xxh3_128 checksum has 8 bytes, expected 16");
}

// A format 1.0 artifact has neither checksum field: it loads unverified; from format 1.1 on
// a segment without a checksum is corrupt.
TEST(ArtifactIntegrity, SegmentsWithoutChecksums) {
  Fake fake;
  std::vector<uint8_t> bad = fake.Bytes();
  StripSegmentChecksums(bad, xrt::kXpkFormatMinor);
  ASSERT_EQ(ManifestOf(bad)->segments()->Get(1)->checksum(), nullptr);
  EXPECT_EQ(LoadError(bad), fmt::format("model.xpk: segment 0 (weights): no checksum, but format "
                                        "1.{} requires one",
                                        xrt::kXpkFormatMinor));

  StripSegmentChecksums(bad, 0);  // a genuine 1.0 artifact
  auto loaded = Load(bad);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Status v = (*loaded)->VerifySegment(0);
  EXPECT_EQ(v.code(), xrt::StatusCode::kFailedPrecondition);
  EXPECT_EQ(v.message(),
            "model.xpk: segment 0 (weights): no checksum to verify against (artifact format 1.0)");
  EXPECT_THAT(xrt::ManifestToText(**loaded), HasSubstr("align 64  checksum none\n"));
  EXPECT_EQ(xrt::ManifestToJson(**loaded)["segments"][1]["checksum_algorithm"], "none");
  // Unverified, as documented: a corrupt code byte goes unnoticed in a 1.0 artifact.
  bad[ManifestOf(bad)->segments()->Get(1)->offset()] ^= 0x01;
  EXPECT_TRUE(Load(bad).ok());
}

// The code module verifies its own sealed copy, the bytes dlopen maps: a file overwritten in
// place after Artifact::Open() must not get its new code executed.
TEST(ArtifactIntegrity, CodeModuleVerifiesTheBytesItMaps) {
  if (!xrt::CpuHasFeature("avx2")) GTEST_SKIP() << "the fake code module requires avx2";
  namespace fs = std::filesystem;
  const std::string path =
      ::testing::TempDir() + "/xpk_code_integrity_" + std::to_string(::getpid()) + ".xpk";
  Fake fake;
  ASSERT_TRUE(fake.writer.WriteToFile(path, fake.Builder()).ok());
  auto loaded = xrt::Artifact::Open(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const xpk::Segment* code = (*loaded)->manifest().segments()->Get(fake.code_segment);

  // Intact: verification passes and dlopen then rejects the fake (not a real ELF) code.
  auto intact = xrt::CodeModule::Load(**loaded, 0);
  ASSERT_FALSE(intact.ok());
  EXPECT_THAT(intact.status().message(), HasSubstr("cannot load the code segment"));

  // Overwritten in place after Open(): the mapping sees the new byte.
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(code->offset() + 2));
    f.put(static_cast<char>(fake.inputs.code[2] ^ 0x10));
  }
  auto tampered = xrt::CodeModule::Load(**loaded, 0);
  ASSERT_FALSE(tampered.ok());
  EXPECT_EQ(tampered.status().code(), xrt::StatusCode::kDataLoss);
  EXPECT_THAT(tampered.status().message(),
              HasSubstr(path + ": segment 1 (code): checksum mismatch"));
  fs::remove(path);
}

// ---- valid artifact ------------------------------------------------------------------

TEST(Artifact, WriteAndLoad) {
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  auto loaded = Load(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const xrt::Artifact& a = **loaded;

  EXPECT_EQ(a.path(), "model.xpk");
  EXPECT_EQ(a.header().manifest_offset, 64u);
  EXPECT_EQ(a.header().file_size, bytes.size());
  ASSERT_EQ(a.num_segments(), 2u);
  ASSERT_EQ(a.num_weights(), 2u);

  // Segments are placed after the manifest, aligned, with zero padding in between.
  const xpk::Segment* ws = a.manifest().segments()->Get(0);
  const xpk::Segment* cs = a.manifest().segments()->Get(1);
  EXPECT_EQ(ws->kind(), xpk::SegmentKind::weights);
  EXPECT_EQ(ws->offset() % 4096, 0u);
  EXPECT_GE(ws->offset(), 64 + a.header().manifest_size);
  EXPECT_EQ(cs->kind(), xpk::SegmentKind::code);
  EXPECT_EQ(cs->offset() % 64, 0u);
  for (uint64_t i = 64 + a.header().manifest_size; i < ws->offset(); ++i) {
    ASSERT_EQ(bytes[i], 0) << i;
  }
  auto code = a.segment_data(1);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(std::vector<uint8_t>(code->data, code->data + code->size), fake.inputs.code);
  EXPECT_FALSE(a.segment_data(2).ok());

  // Weights: in place, aligned, bytes intact, found by name.
  auto idx = a.FindWeight("lm_head.weight");
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, 1u);
  auto w = a.weight_data(*idx);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % 64, 0u);
  EXPECT_EQ(std::vector<uint8_t>(w->data, w->data + w->size), fake.inputs.lm_head);
  auto e = a.weight_data(0);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(std::vector<uint8_t>(e->data, e->data + e->size), fake.inputs.embed);
  auto nf = a.FindWeight("nope");
  ASSERT_FALSE(nf.ok());
  EXPECT_EQ(nf.status().code(), xrt::StatusCode::kNotFound);
  EXPECT_THAT(nf.status().message(), HasSubstr("'nope'"));
  EXPECT_FALSE(a.weight_data(2).ok());

  // Executables.
  auto t16 = a.FindExecutable("lm_step_t16");
  ASSERT_TRUE(t16.ok());
  EXPECT_EQ((*t16)->commands()->size(), 2u);
  EXPECT_EQ((*t16)->arena_size(), 4096u);
  auto by_bucket = a.FindExecutable(xpk::ExecutableKind::lm_step, 32, xpk::LoraMode::none);
  ASSERT_TRUE(by_bucket.ok());
  EXPECT_EQ((*by_bucket)->name()->str(), "lm_step_t32");
  EXPECT_FALSE(a.FindExecutable(xpk::ExecutableKind::lm_step, 64, xpk::LoraMode::none).ok());
  auto cover = a.FindCoveringExecutable(xpk::ExecutableKind::lm_step, 17, xpk::LoraMode::none);
  ASSERT_TRUE(cover.ok());
  EXPECT_EQ((*cover)->name()->str(), "lm_step_t32");
  cover = a.FindCoveringExecutable(xpk::ExecutableKind::lm_step, 1, xpk::LoraMode::none);
  ASSERT_TRUE(cover.ok());
  EXPECT_EQ((*cover)->name()->str(), "lm_step_t16");
  auto none = a.FindCoveringExecutable(xpk::ExecutableKind::lm_step, 33, xpk::LoraMode::none);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("largest compiled bucket is 32"));
  EXPECT_EQ(a.ExecutablesOfKind(xpk::ExecutableKind::lm_logits, xpk::LoraMode::none).size(), 1u);
  EXPECT_TRUE(a.ExecutablesOfKind(xpk::ExecutableKind::lm_step, xpk::LoraMode::mixed).empty());

  // Tokenizer and provenance (sorted by the writer).
  auto spec = a.tokenizer_spec();
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->vocab, fake.tokenizer.vocab);
  EXPECT_EQ(spec->merges, fake.tokenizer.merges);
  xrt::ArtifactProvenance p = a.provenance();
  EXPECT_EQ(p.compiler_version, "xcc test");
  ASSERT_EQ(p.options.size(), 2u);
  EXPECT_EQ(p.options[0].first, "buckets");
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[0].path, "model/config.json");
  EXPECT_EQ(p.inputs[1].size, 1234u);
}

TEST(Artifact, WriteFileAtomicallyAndDeterministically) {
  namespace fs = std::filesystem;
  const std::string dir = ::testing::TempDir() + "/xpk_write_test_" + std::to_string(::getpid());
  fs::remove_all(dir);
  ASSERT_TRUE(fs::create_directories(dir));
  const std::string path = dir + "/model.xpk";
  Fake a, b;  // two independent writers, same inputs
  ASSERT_TRUE(a.writer.WriteToFile(path, a.Builder()).ok());
  std::vector<uint8_t> first = ReadFile(path);
  Status s = b.writer.WriteToFile(path, b.Builder());  // overwrites in place
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<uint8_t> second = ReadFile(path);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, a.Bytes());

  // No temporary files left behind.
  int entries = 0;
  for (const auto& ent : fs::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(ent.path().filename(), "model.xpk");
  }
  EXPECT_EQ(entries, 1);

  auto loaded = xrt::Artifact::Open(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)->path(), path);
  TouchEverything(**loaded);

  auto missing = xrt::Artifact::Open(dir + "/missing.xpk");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.xpk: cannot open"));
  fs::remove_all(dir);
}

TEST(Artifact, WriterRefusesInvalidArtifact) {
  FakeParams p;
  p.arena_binding_offset = 4096;
  Fake fake(p);
  auto bytes = fake.writer.WriteToBytes(fake.Builder(), {}, "model.xpk");
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), xrt::StatusCode::kInternal);
  EXPECT_THAT(bytes.status().message(), HasSubstr("arena range [4096, 5120)"));
  const std::string path = ::testing::TempDir() + "/refused.xpk";
  ::unlink(path.c_str());
  EXPECT_FALSE(fake.writer.WriteToFile(path, fake.Builder()).ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0);  // nothing committed
}

TEST(Artifact, WriterArgumentErrors) {
  ArtifactWriter w;
  EXPECT_FALSE(w.AddSegment(xpk::SegmentKind::weights, {1, 2}, 64).ok());
  EXPECT_FALSE(w.AddSegment(xpk::SegmentKind::code, {1, 2}, 96).ok());
  auto ok = w.AddSegment(xpk::SegmentKind::adapters, {1, 2}, 128);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 0u);
}

TEST(Artifact, Printer) {
  Fake fake;
  auto loaded = Load(fake.Bytes());
  ASSERT_TRUE(loaded.ok());
  std::string text = xrt::ManifestToText(**loaded);
  EXPECT_THAT(text, HasSubstr("architecture LlamaForCausalLM"));
  EXPECT_THAT(text, HasSubstr("tokenizer: bpe, 8 tokens, 2 merges, 2 added (2 special)"));
  EXPECT_THAT(text, HasSubstr("weights: 2 tensors"));
  EXPECT_THAT(text,
              HasSubstr("lm_step_t16 (lm_step, num_tokens 16, lora none): io 1152 B, arena 4096 B, "
                        "2 commands (1 dispatch, 1 matmul)"));
  EXPECT_THAT(text, HasSubstr("token_ids"));
  EXPECT_THAT(text, HasSubstr("option buckets = 16,32"));
  EXPECT_EQ(text.find("Ġab"), std::string::npos);  // no vocabulary dump
  nlohmann::json j = xrt::ManifestToJson(**loaded);
  EXPECT_EQ(j["weights"]["count"], 2);
  EXPECT_EQ(j["weights"]["tensors"][1]["layout"], "packed_panels");
  EXPECT_EQ(j["weights"]["tensors"][1]["pack_nr"], 16);
  EXPECT_EQ(j["executables"][0]["commands"].size(), 2u);
  EXPECT_EQ(j["executables"][0]["commands"][1]["ukernel"], "matmul");
  EXPECT_EQ(j["executables"][0]["commands"][1]["iparams"].size(), 8u);
  EXPECT_EQ(j["executables"][0]["command_counts"]["dispatch"], 1);
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 8);
  EXPECT_EQ(j["limits"]["max_blocks_per_req"], 4);
  EXPECT_EQ(j["provenance"]["inputs"][0]["role"], "config");
  // Every segment's checksum.
  std::vector<uint8_t> bytes = fake.Bytes();
  const std::string code_digest = StoredChecksumHex(bytes, fake.code_segment);
  EXPECT_EQ(code_digest.size(), 32u);
  EXPECT_THAT(text, HasSubstr("align 64  checksum xxh3_128 " + code_digest + "\n"));
  EXPECT_THAT(text, HasSubstr("checksum xxh3_128 " + StoredChecksumHex(bytes, 0)));
  EXPECT_EQ(j["segments"][1]["checksum_algorithm"], "xxh3_128");
  EXPECT_EQ(j["segments"][1]["checksum"], code_digest);
}

// ---- corrupt files -------------------------------------------------------------------

TEST(ArtifactCorrupt, Truncated) {
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  const uint64_t manifest_size =
      xrt::DecodeFileHeader(bytes.data(), bytes.size(), "m")->manifest_size;
  const uint64_t seg = ManifestOf(bytes)->segments()->Get(0)->offset();
  for (uint64_t cut :
       {uint64_t{0}, uint64_t{5}, uint64_t{8}, uint64_t{40}, uint64_t{63}, uint64_t{64},
        64 + manifest_size / 2, 64 + manifest_size, seg + 100, uint64_t(bytes.size() - 1)}) {
    std::vector<uint8_t> t(bytes.begin(), bytes.begin() + cut);
    std::string err = LoadError(t);
    SCOPED_TRACE(cut);
    if (cut == 0) {
      EXPECT_EQ(err, "model.xpk: not an xpk artifact (bad magic)");
    } else if (cut < 64) {
      EXPECT_THAT(err, HasSubstr("model.xpk: truncated: file has"));
    } else {
      EXPECT_EQ(err, fmt::format("model.xpk: truncated: header says {} bytes, file has {}",
                                 bytes.size(), cut));
    }
  }
}

TEST(ArtifactCorrupt, MagicAndVersion) {
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  std::vector<uint8_t> bad = bytes;
  bad[1] = 'Q';
  EXPECT_EQ(LoadError(bad), "model.xpk: not an xpk artifact (bad magic)");
  bad = bytes;
  bad[8] = 2;
  EXPECT_EQ(LoadError(bad), fmt::format("model.xpk: format version 2.{} is not supported by this "
                                        "runtime (supports 1.x)",
                                        xrt::kXpkFormatMinor));
  bad = bytes;
  bad[64 + 4] = 'Z';  // flatbuffer file identifier
  EXPECT_EQ(LoadError(bad), "model.xpk: manifest file identifier is not \"XPK1\"");
  // Manifest major differs from the header's.
  FakeParams p;
  p.format_major = 7;
  Fake other(p);
  auto written = other.writer.WriteToBytes(other.Builder(), {}, "model.xpk");
  ASSERT_FALSE(written.ok());  // the writer itself refuses a manifest of another major
  EXPECT_THAT(written.status().message(), HasSubstr("format_major is 7"));
  bad = bytes;
  Poke<uint32_t>(FieldAddr(ManifestOf(bad), xpk::Manifest::VT_FORMAT_MAJOR), 3);
  EXPECT_EQ(LoadError(bad), "model.xpk: manifest format_major 3 does not match the header's 1");
}

TEST(ArtifactCorrupt, VerifierRejectsGarbage) {
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  // Point the root table far outside the manifest.
  std::vector<uint8_t> bad = bytes;
  Poke<uint32_t>(&bad[64], 0x7ffffff0u);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: manifest verification failed; data may be truncated or corrupt");
  // Shrink the manifest range in the header so its tables run past the end.
  bad = bytes;
  uint64_t msize = xrt::DecodeFileHeader(bytes.data(), bytes.size(), "m")->manifest_size;
  Poke<uint64_t>(&bad[32], msize / 2);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: manifest verification failed; data may be truncated or corrupt");
}

TEST(ArtifactCorrupt, SegmentOutOfRangeAndMisaligned) {
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  std::vector<uint8_t> bad = bytes;
  const xpk::Segment* seg = ManifestOf(bad)->segments()->Get(0);
  const uint64_t off = uint64_t{1} << 40;
  Poke<uint64_t>(FieldAddr(seg, xpk::Segment::VT_OFFSET), off);
  EXPECT_THAT(LoadError(bad),
              HasSubstr(fmt::format("model.xpk: segment 0 (weights): range [{}, ", off)));
  EXPECT_THAT(LoadError(bad), HasSubstr(fmt::format("exceeds file size {}", bytes.size())));

  bad = bytes;
  seg = ManifestOf(bad)->segments()->Get(0);
  Poke<uint64_t>(FieldAddr(seg, xpk::Segment::VT_SIZE), UINT64_MAX - 100);  // overflow
  EXPECT_THAT(LoadError(bad), HasSubstr("exceeds file size"));

  bad = bytes;
  seg = ManifestOf(bad)->segments()->Get(1);
  Poke<uint64_t>(FieldAddr(seg, xpk::Segment::VT_OFFSET), seg->offset() + 8);
  EXPECT_THAT(LoadError(bad), HasSubstr("segment 1 (code): offset"));
  EXPECT_THAT(LoadError(bad), HasSubstr("is not 64-byte aligned"));

  bad = bytes;
  seg = ManifestOf(bad)->segments()->Get(0);
  Poke<uint64_t>(FieldAddr(seg, xpk::Segment::VT_ALIGNMENT), 64);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: segment 0 (weights): alignment 64 is below the page size 4096");

  bad = bytes;
  seg = ManifestOf(bad)->segments()->Get(0);
  Poke<uint64_t>(FieldAddr(seg, xpk::Segment::VT_ALIGNMENT), 100);
  EXPECT_THAT(LoadError(bad), HasSubstr("alignment 100 is not a power of two"));

  bad = bytes;  // the code segment moved onto the weights
  seg = ManifestOf(bad)->segments()->Get(1);
  Poke<uint64_t>(FieldAddr(seg, xpk::Segment::VT_OFFSET),
                 ManifestOf(bad)->segments()->Get(0)->offset());
  EXPECT_THAT(LoadError(bad), HasSubstr("overlaps segment"));

  bad = bytes;  // onto the manifest
  seg = ManifestOf(bad)->segments()->Get(1);
  Poke<uint64_t>(FieldAddr(seg, xpk::Segment::VT_OFFSET), 64);
  EXPECT_THAT(LoadError(bad), HasSubstr("overlaps the header and manifest"));
}

TEST(ArtifactCorrupt, WeightOutsideSegment) {
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  std::vector<uint8_t> bad = bytes;
  const xpk::Weight* w = ManifestOf(bad)->weights()->Get(1);
  const uint64_t seg_size = ManifestOf(bad)->segments()->Get(0)->size();
  Poke<uint64_t>(FieldAddr(w, xpk::Weight::VT_OFFSET), 1024 * 64);
  EXPECT_EQ(LoadError(bad),
            fmt::format("model.xpk: weight 1 'lm_head.weight': range [65536, 66560) exceeds its "
                        "segment 0 of {} bytes",
                        seg_size));

  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(1);
  Poke<uint64_t>(FieldAddr(w, xpk::Weight::VT_OFFSET), w->offset() + 4);
  EXPECT_THAT(LoadError(bad), HasSubstr("weight 1 'lm_head.weight': offset"));

  bad = bytes;  // packed size must account for padding N up to pack_nr
  w = ManifestOf(bad)->weights()->Get(1);
  Poke<uint64_t>(FieldAddr(w, xpk::Weight::VT_SIZE), kVocab * kHidden * 4);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: weight 1 'lm_head.weight': size 512 does not match f32 [8, 16] "
            "packed_panels (1024 bytes)");

  // Quantized dtypes: packed only, K a multiple of their block, the kernels' panel width.
  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(0);
  Poke<uint8_t>(FieldAddr(w, xpk::Weight::VT_DTYPE), static_cast<uint8_t>(xpk::DType::q4_1));
  EXPECT_EQ(LoadError(bad),
            "model.xpk: weight 0 'model.embed_tokens.weight': dtype q4_1 is a packed format: "
            "only packed_panels");
  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(1);
  Poke<uint8_t>(FieldAddr(w, xpk::Weight::VT_DTYPE), static_cast<uint8_t>(xpk::DType::q8_0));
  EXPECT_EQ(LoadError(bad),
            "model.xpk: weight 1 'lm_head.weight': q8_0 weight has K = 16, not a multiple of its "
            "block size 32");
  // K-quants (format 1.5; q3_k 1.16), bf16 pairs (1.14), q5_0 / q5_1 (1.15), iq4_nl /
  // iq4_xs (1.17): packed only; the K-quants and iq4_xs need K to be a multiple of 256, q5
  // and iq4_nl of 32, every non-f32 format the kernels' panel width.
  for (xpk::DType packed :
       {xpk::DType::q4_k, xpk::DType::q5_k, xpk::DType::q6_k, xpk::DType::bf16_pairs,
        xpk::DType::bf16_pairs_amx, xpk::DType::q5_0, xpk::DType::q5_1, xpk::DType::q3_k,
        xpk::DType::iq4_nl, xpk::DType::iq4_xs}) {
    const std::string name = xpk::EnumNameDType(packed);
    bad = bytes;
    w = ManifestOf(bad)->weights()->Get(0);
    Poke<uint8_t>(FieldAddr(w, xpk::Weight::VT_DTYPE), static_cast<uint8_t>(packed));
    EXPECT_EQ(LoadError(bad), "model.xpk: weight 0 'model.embed_tokens.weight': dtype " + name +
                                  " is a packed format: only packed_panels");
    bad = bytes;
    w = ManifestOf(bad)->weights()->Get(1);
    Poke<uint8_t>(FieldAddr(w, xpk::Weight::VT_DTYPE), static_cast<uint8_t>(packed));
    const bool pairs = packed == xpk::DType::bf16_pairs || packed == xpk::DType::bf16_pairs_amx;
    const bool group =
        packed == xpk::DType::q5_0 || packed == xpk::DType::q5_1 || packed == xpk::DType::iq4_nl;
    EXPECT_EQ(LoadError(bad), "model.xpk: weight 1 'lm_head.weight': " + name +
                                  (pairs ? " weight has pack_nr 16 (must be 32)"
                                         : std::string(" weight has K = 16, not a multiple of its "
                                                       "block size ") +
                                               (group ? "32" : "256")));
  }
  // q5_k / q6_k in the bit-plane layouts of formats 1.5-1.8 / 1.5-1.7 and
  // q4_0 / q4_1 by k-row (1.4-1.9): named, with what to do, whichever weight
  // and layout.
  struct Retired {
    xpk::DType dtype;
    int weight;
    const char* expected;
  };
  for (const Retired& r :
       {Retired{xpk::DType::q5_k_bit_planes, 0,
                "model.xpk: weight 0 'model.embed_tokens.weight': q5_k weight in the layout "
                "of artifact formats 1.5-1.8 (high bits as bit planes), which this runtime no "
                "longer reads: recompile the artifact with this xcc"},
        Retired{xpk::DType::q6_k_bit_planes, 1,
                "model.xpk: weight 1 'lm_head.weight': q6_k weight in the layout of artifact "
                "formats 1.5-1.7 (high bits as bit planes), which this runtime no longer "
                "reads: recompile the artifact with this xcc"},
        Retired{xpk::DType::q4_0_k_rows, 1,
                "model.xpk: weight 1 'lm_head.weight': q4_0 weight in the layout of artifact "
                "formats 1.4-1.9 (quants by k-row, not quads), which this runtime no longer "
                "reads: recompile the artifact with this xcc"},
        Retired{xpk::DType::q4_1_k_rows, 0,
                "model.xpk: weight 0 'model.embed_tokens.weight': q4_1 weight in the layout "
                "of artifact formats 1.4-1.9 (quants by k-row, not quads), which this runtime "
                "no longer reads: recompile the artifact with this xcc"},
        Retired{xpk::DType::q4_k_k_rows, 1,
                "model.xpk: weight 1 'lm_head.weight': q4_k weight in the layout of artifact "
                "formats 1.5-1.10 (quants by k-row, not quads), which this runtime no longer "
                "reads: recompile the artifact with this xcc"},
        Retired{xpk::DType::q5_k_k_rows, 0,
                "model.xpk: weight 0 'model.embed_tokens.weight': q5_k weight in the layout "
                "of artifact formats 1.9-1.10 (quants by k-row, not quads), which this runtime "
                "no longer reads: recompile the artifact with this xcc"},
        Retired{xpk::DType::q6_k_k_rows, 1,
                "model.xpk: weight 1 'lm_head.weight': q6_k weight in the layout of artifact "
                "formats 1.8-1.10 (quants by k-row, not quads), which this runtime no longer "
                "reads: recompile the artifact with this xcc"}}) {
    bad = bytes;
    w = ManifestOf(bad)->weights()->Get(r.weight);
    Poke<uint8_t>(FieldAddr(w, xpk::Weight::VT_DTYPE), static_cast<uint8_t>(r.dtype));
    EXPECT_EQ(LoadError(bad), r.expected);
  }
  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(1);
  Poke<uint8_t>(FieldAddr(w, xpk::Weight::VT_DTYPE), static_cast<uint8_t>(xpk::DType::bf16));
  EXPECT_EQ(LoadError(bad),
            "model.xpk: weight 1 'lm_head.weight': bf16 weight has pack_nr 16 "
            "(must be 32)");
  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(1);
  Poke<uint8_t>(FieldAddr(w, xpk::Weight::VT_DTYPE), static_cast<uint8_t>(xpk::DType::i32));
  EXPECT_EQ(LoadError(bad), "model.xpk: weight 1 'lm_head.weight': dtype i32 cannot be packed");

  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(0);
  Poke<uint32_t>(FieldAddr(w, xpk::Weight::VT_SEGMENT), 1);
  EXPECT_THAT(LoadError(bad), HasSubstr("segment 1 is a code segment, not weights"));

  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(0);
  Poke<uint32_t>(FieldAddr(w, xpk::Weight::VT_SEGMENT), 9);
  EXPECT_THAT(LoadError(bad), HasSubstr("segment index 9 out of range (2 segments)"));

  bad = bytes;
  w = ManifestOf(bad)->weights()->Get(0);
  Poke<int64_t>(w->shape()->data(), -8);
  EXPECT_THAT(LoadError(bad), HasSubstr("shape dim 0 is -8"));
}

TEST(ArtifactCorrupt, BadCommands) {
  {
    FakeParams p;
    p.arena_binding_offset = 4096;
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)),
              "model.xpk: executable 'lm_step_t16' command 1 binding 0: arena range [4096, 5120) "
              "exceeds arena size 4096");
  }
  {
    FakeParams p;
    p.arena_binding_offset = UINT64_MAX - 8;  // overflow
    EXPECT_THAT(LoadError(Fake(p).Bytes(false)), HasSubstr("exceeds arena size 4096"));
  }
  {
    FakeParams p;
    p.matmul_ukernel = static_cast<xpk::Ukernel>(9);
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)),
              "model.xpk: executable 'lm_step_t16' command 1: unknown ukernel 9");
    p.matmul_ukernel = xpk::Ukernel::none;
    EXPECT_THAT(LoadError(Fake(p).Bytes(false)), HasSubstr("command 1: unknown ukernel 0"));
    p.matmul_ukernel = xpk::Ukernel::paged_attention;
    EXPECT_THAT(LoadError(Fake(p).Bytes(false)),
                HasSubstr("ukernel paged_attention takes 10 bindings, got 3"));
  }
  {
    FakeParams p;
    p.matmul_compute = xpk::ComputeType::bf16;  // a matmul may compute in bf16
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)), "<loaded fine>");
    p.matmul_compute = xpk::ComputeType::int8;  // or in int8
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)), "<loaded fine>");
    p.matmul_compute = static_cast<xpk::ComputeType>(7);
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)),
              "model.xpk: executable 'lm_step_t16' command 1: unknown compute type 7");
    p.matmul_compute = xpk::ComputeType::f32;
    p.dispatch_compute = xpk::ComputeType::bf16;
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)),
              "model.xpk: executable 'lm_step_t16' command 0: compute bf16 on a dispatch command "
              "(only a matmul, or an attention in bf16, has one)");
  }
  {
    FakeParams p;
    p.matmul_iparams = 7;
    EXPECT_THAT(LoadError(Fake(p).Bytes(false)),
                HasSubstr("ukernel matmul takes 8 iparams, got 7"));
  }
  {
    FakeParams p;
    p.dispatch_function = 2;
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)),
              "model.xpk: executable 'lm_step_t16' command 0: function index 2 out of range "
              "(code module 0 has 2 functions)");
  }
  {
    FakeParams p;
    p.kv_layer = kLayers;
    EXPECT_THAT(LoadError(Fake(p).Bytes(false)),
                HasSubstr("command 0 binding 2: kv_key layer 2 out of range (2 layers)"));
  }
  {
    FakeParams p;
    p.second_executable_name = "lm_step_t16";
    EXPECT_THAT(LoadError(Fake(p).Bytes(false)), HasSubstr("'lm_step_t16': duplicate name"));
  }
  // Patched in place: binding kinds, weight index, io range, workgroups, tensor spec.
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  auto command = [](std::vector<uint8_t>& b, uint32_t i) {
    return ManifestOf(b)->executables()->Get(0)->commands()->Get(i);
  };
  std::vector<uint8_t> bad = bytes;
  const xpk::Binding* bd = command(bad, 1)->bindings()->Get(1);
  Poke<uint32_t>(reinterpret_cast<const uint8_t*>(bd) + 4, 5);  // Binding.index
  EXPECT_THAT(LoadError(bad),
              HasSubstr("command 1 binding 1: weight index 5 out of range (2 weights)"));
  bad = bytes;
  bd = command(bad, 1)->bindings()->Get(2);
  Poke<uint64_t>(reinterpret_cast<const uint8_t*>(bd) + 16, 2000);  // Binding.size
  EXPECT_THAT(LoadError(bad),
              HasSubstr("command 1 binding 2: io range [128, 2128) exceeds io size 1152"));
  bad = bytes;
  bd = command(bad, 1)->bindings()->Get(2);
  Poke<uint8_t>(reinterpret_cast<const uint8_t*>(bd), 42);  // Binding.kind
  EXPECT_THAT(LoadError(bad), HasSubstr("command 1 binding 2: unknown binding kind 42"));
  bad = bytes;
  Poke<int64_t>(FieldAddr(command(bad, 0), xpk::Command::VT_WORKGROUPS), 0);
  EXPECT_THAT(LoadError(bad), HasSubstr("command 0: workgroups is 0"));
  bad = bytes;
  Poke<uint8_t>(FieldAddr(command(bad, 1), xpk::Command::VT_KIND), 7);
  EXPECT_THAT(LoadError(bad), HasSubstr("command 1: unknown command kind 7"));
  bad = bytes;
  const xpk::TensorSpec* out = ManifestOf(bad)->executables()->Get(0)->outputs()->Get(0);
  Poke<uint64_t>(FieldAddr(out, xpk::TensorSpec::VT_OFFSET), 256);
  EXPECT_EQ(LoadError(bad),
            "model.xpk: executable 'lm_step_t16' output 0 'hidden': range [256, 1280) exceeds io "
            "size 1152");
  bad = bytes;
  out = ManifestOf(bad)->executables()->Get(0)->outputs()->Get(0);
  Poke<uint64_t>(FieldAddr(out, xpk::TensorSpec::VT_SIZE), 1000);
  EXPECT_THAT(LoadError(bad),
              HasSubstr("'hidden': size 1000 does not match f32 [16, 16] (1024 bytes)"));
  bad = bytes;  // two lm_step executables for the same bucket
  Poke<int64_t>(FieldAddr(ManifestOf(bad)->executables()->Get(1), xpk::Executable::VT_NUM_TOKENS),
                16);
  EXPECT_THAT(LoadError(bad), HasSubstr("a second lm_step executable for bucket 16"));
}

TEST(ArtifactCorrupt, ConfigTokenizerLimits) {
  {
    FakeParams p;
    p.with_tokenizer = false;
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)), "model.xpk: manifest has no tokenizer");
  }
  {
    FakeParams p;
    p.max_blocks_per_req = 5;
    EXPECT_EQ(LoadError(Fake(p).Bytes(false)),
              "model.xpk: limits: max_blocks_per_req is 5, expected ceil(max_model_len 64 / "
              "block_size 16) = 4");
  }
  Fake fake;
  std::vector<uint8_t> bytes = fake.Bytes();
  std::vector<uint8_t> bad = bytes;
  Poke<int64_t>(FieldAddr(ManifestOf(bad)->config(), xpk::ModelConfig::VT_HIDDEN_SIZE), 0);
  EXPECT_EQ(LoadError(bad), "model.xpk: config: hidden_size is 0 (must be > 0)");
  bad = bytes;
  Poke<int64_t>(FieldAddr(ManifestOf(bad)->limits(), xpk::ServingLimits::VT_BLOCK_SIZE), 0);
  EXPECT_EQ(LoadError(bad), "model.xpk: limits: block_size is 0 (must be > 0)");
  bad = bytes;
  Poke<int32_t>(FieldAddr(ManifestOf(bad)->tokenizer(), xpk::Tokenizer::VT_BOS_ID), 1000);
  EXPECT_EQ(LoadError(bad), "model.xpk: tokenizer: bos_id 1000 is outside [-1, 8)");
}

// Every single-byte change in the manifest must load or fail cleanly; loads that succeed
// must keep every promise (all data in bounds).
TEST(ArtifactCorrupt, FlipEveryManifestByte) {
  Fake fake;
  const std::vector<uint8_t> bytes = fake.Bytes();
  const uint64_t end = 64 + xrt::DecodeFileHeader(bytes.data(), bytes.size(), "m")->manifest_size;
  int loaded = 0, rejected = 0;
  std::vector<uint8_t> bad = bytes;
  for (uint64_t i = 0; i < end; ++i) {
    for (uint8_t x : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x80}}) {
      bad[i] = bytes[i] ^ x;
      auto a = Load(bad);
      if (a.ok()) {
        ++loaded;
        TouchEverything(**a);
      } else {
        ++rejected;
        ASSERT_THAT(a.status().message(), HasSubstr("model.xpk: ")) << i;
      }
      bad[i] = bytes[i];
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(loaded, 0);  // e.g. flips inside string payloads or unchecked values
}

// Random truncations and multi-byte corruption anywhere: only "no crash" is checked.
TEST(ArtifactCorrupt, FuzzNoCrash) {
  Fake fake;
  const std::vector<uint8_t> bytes = fake.Bytes();
  std::mt19937_64 rng(12345);
  const uint64_t manifest_end =
      64 + xrt::DecodeFileHeader(bytes.data(), bytes.size(), "m")->manifest_size;
  for (int iter = 0; iter < 10000; ++iter) {
    std::vector<uint8_t> bad = bytes;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) {
      // Mostly the manifest, where structure lives.
      const uint64_t range = (rng() % 4 == 0) ? bad.size() : manifest_end;
      bad[rng() % range] = static_cast<uint8_t>(rng());
    }
    if (rng() % 4 == 0) bad.resize(rng() % bad.size());
    auto a = Load(bad);
    if (a.ok()) TouchEverything(**a);
  }
}

}  // namespace
}  // namespace xcc
