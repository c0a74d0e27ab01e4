// The ukernel contract (schemas/abi.h) from both sides: commands built by role the
// way the compiler's emitter builds them (abi::UkernelCommand) are accepted by the
// loader's validator and run by the executor, which reads them by role
// (abi::UkernelView) and computes what the roles say; commands that break the
// contract are rejected by the loader with the role named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "compiler/artifact/artifact_writer.h"
#include "runtime/base/thread_pool.h"
#include "runtime/executor/executor.h"
#include "runtime/kernels/matmul.h"
#include "runtime/loader/artifact.h"
#include "runtime/loader/file_header.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

namespace xcc {
namespace {

using ::testing::HasSubstr;
using P = xpk::abi::MatmulParam;
using B = xpk::abi::MatmulBinding;
using MatmulCommand = xpk::abi::UkernelCommand<xpk::Ukernel::matmul, xpk::Binding>;

// C [M][N] (row stride kLdc) = A [M][K] (row stride kLda) · Wᵀ (+ bias) (+ ACC, row
// stride kLdAcc): every stride differs from the row length, so a role read at the
// wrong position gives a wrong result.
constexpr int64_t kM = 3, kN = 7, kK = 5, kLda = 6, kLdc = 9, kLdAcc = 8;
// The io buffer: a, acc, c at these byte offsets.
constexpr uint64_t kAOffset = 0, kAccOffset = 128, kCOffset = 256, kIoSize = 384;
constexpr uint32_t kWeightW = 0, kWeightBias = 1;

// A strided [kM][cols] tensor at `offset` of the io buffer, as the emitter binds it.
xpk::Binding IoBinding(uint64_t offset, int64_t cols, int64_t stride) {
  return xpk::Binding(xpk::BindingKind::io, 0, offset, ((kM - 1) * stride + cols) * 4);
}

enum class Acc { kNone, kDisjoint, kInPlace };

// What the emitter writes for one xg.linear.
struct CommandSpec {
  xpk::Ukernel ukernel = xpk::Ukernel::matmul;
  std::vector<xpk::Binding> bindings;
  std::vector<int64_t> iparams;
  std::vector<float> fparams;
};

CommandSpec MatmulSpec(bool bias, Acc acc) {
  MatmulCommand u;
  const xpk::Binding c = IoBinding(kCOffset, kN, kLdc);
  u.Bind(B::kA, IoBinding(kAOffset, kK, kLda));
  u.Bind(B::kW, xpk::Binding(xpk::BindingKind::weight, kWeightW, 0, 0));
  u.Bind(B::kC, c);
  if (bias) u.Bind(B::kBias, xpk::Binding(xpk::BindingKind::weight, kWeightBias, 0, 0));
  if (acc == Acc::kDisjoint) u.Bind(B::kAcc, IoBinding(kAccOffset, kN, kLdAcc));
  if (acc == Acc::kInPlace) u.Bind(B::kAcc, c);
  u.Set(P::kM, kM);
  u.Set(P::kN, kN);
  u.Set(P::kK, kK);
  u.Set(P::kLda, kLda);
  u.Set(P::kLdc, kLdc);
  u.Set(P::kLdAcc, acc == Acc::kDisjoint ? kLdAcc : acc == Acc::kInPlace ? kLdc : 0);
  CommandSpec s;
  EXPECT_EQ(u.Finish(&s.iparams, &s.fparams, &s.bindings), "");
  return s;
}

std::vector<float> Values(size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 11) + shift;
  return v;
}

// A one-layer artifact whose executable lm_step_t3 runs `commands` (ukernels only, so
// no generated code): weights W [kN][kK] (packed) and bias [kN]; io tensors a, acc, c.
class ContractArtifact {
 public:
  ContractArtifact() : w_(Values(kN * kK, 0.25f, -1.0f)), bias_(Values(kN, 0.5f, 0.125f)) {}

  const std::vector<float>& w() const { return w_; }
  const std::vector<float>& bias() const { return bias_; }

  xrt::Expected<std::unique_ptr<xrt::Artifact>> Load(const std::vector<CommandSpec>& commands) {
    ArtifactWriter writer;
    std::vector<float> packed(xrt::PackedWeightFloats(kN, kK));
    xrt::PackWeights(w_.data(), kN, kK, packed.data());
    const WeightPlacement w = writer.AppendWeight(packed.data(), packed.size() * 4);
    const WeightPlacement bias = writer.AppendWeight(bias_.data(), bias_.size() * 4);
    ManifestBuildFn build =
        [&](flatbuffers::FlatBufferBuilder& fbb,
            SegmentTable segments) -> Expected<flatbuffers::Offset<xpk::Manifest>> {
      std::vector<int32_t> eos = {1};
      auto config = xpk::CreateModelConfigDirect(
          fbb, "LlamaForCausalLM", /*vocab_size=*/2, /*hidden_size=*/8, /*intermediate_size=*/8,
          /*num_hidden_layers=*/1, /*num_attention_heads=*/1, /*num_key_value_heads=*/1,
          /*head_dim=*/8, /*max_position_embeddings=*/64, 1e-5, 10000.0, 0, false, false, "", &eos);
      std::vector<flatbuffers::Offset<flatbuffers::String>> vocab = {fbb.CreateString("a"),
                                                                     fbb.CreateString("b")};
      auto tokenizer = xpk::CreateTokenizerDirect(fbb, "bpe", &vocab);
      auto limits = xpk::CreateServingLimits(fbb, 4, 64, 64, 16, 4, 0, 0, 0);
      std::vector<int64_t> w_shape = {kN, kK}, bias_shape = {kN};
      std::vector<flatbuffers::Offset<xpk::Weight>> weights = {
          xpk::CreateWeightDirect(fbb, "w", xpk::DType::f32, &w_shape,
                                  xpk::WeightLayout::packed_panels, xrt::kPackNR, w.segment,
                                  w.offset, w.size),
          xpk::CreateWeightDirect(fbb, "bias", xpk::DType::f32, &bias_shape,
                                  xpk::WeightLayout::row_major, 0, bias.segment, bias.offset,
                                  bias.size)};
      std::vector<int64_t> a_shape = {kM, kLda}, acc_shape = {kM, kLdAcc}, c_shape = {kM, kLdc};
      std::vector<flatbuffers::Offset<xpk::TensorSpec>> inputs = {
          xpk::CreateTensorSpecDirect(fbb, "a", xpk::DType::f32, &a_shape, kAOffset, kM * kLda * 4),
          xpk::CreateTensorSpecDirect(fbb, "acc", xpk::DType::f32, &acc_shape, kAccOffset,
                                      kM * kLdAcc * 4)};
      std::vector<flatbuffers::Offset<xpk::TensorSpec>> outputs = {xpk::CreateTensorSpecDirect(
          fbb, "c", xpk::DType::f32, &c_shape, kCOffset, kM * kLdc * 4)};
      std::vector<flatbuffers::Offset<xpk::Command>> cmds;
      for (const CommandSpec& c : commands)
        cmds.push_back(xpk::CreateCommandDirect(fbb, xpk::CommandKind::ukernel, 0, c.ukernel, 0,
                                                &c.bindings, &c.iparams, &c.fparams, "linear"));
      std::vector<flatbuffers::Offset<xpk::Executable>> exes = {xpk::CreateExecutableDirect(
          fbb, "lm_step_t3", xpk::ExecutableKind::lm_step, kM, 4, 0, xpk::LoraMode::none, &inputs,
          &outputs, kIoSize, /*arena_size=*/0, &cmds)};
      return xpk::CreateManifest(fbb, xrt::kXpkFormatMajor, xrt::kXpkFormatMinor, config, tokenizer,
                                 limits, segments, fbb.CreateVector(weights), 0,
                                 fbb.CreateVector(exes), 0);
    };
    ArtifactWriteOptions o;
    o.validate = false;  // the test is what the loader says
    XRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.WriteToBytes(build, o, "contract.xpk"));
    return xrt::Artifact::FromBytes("contract.xpk", bytes.data(), bytes.size());
  }

  std::string LoadError(const CommandSpec& command) {
    auto a = Load({command});
    return a.ok() ? "<loaded fine>" : a.status().message();
  }

 private:
  std::vector<float> w_, bias_;
};

// ---------------------------------------------------------------------------
// The executor computes what the emitter's roles say.

struct MatmulCase {
  bool bias;
  Acc acc;
};

std::string MatmulCaseName(const ::testing::TestParamInfo<MatmulCase>& info) {
  static const char* const k_acc[] = {"no_acc", "acc", "acc_in_place"};
  return std::string(info.param.bias ? "bias_" : "no_bias_") +
         k_acc[static_cast<int>(info.param.acc)];
}

class MatmulByRole : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulByRole, ExecutorComputesWhatTheRolesSay) {
  const MatmulCase p = GetParam();
  ContractArtifact artifact;
  auto a = artifact.Load({MatmulSpec(p.bias, p.acc)});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  xrt::ThreadPool pool(2);
  std::vector<float> k_cache(16), v_cache(16);
  xrt::ExecutorParams params;
  params.artifact = a->get();
  params.pool = &pool;
  params.kv = {{k_cache.data()}, {v_cache.data()}, 1};
  auto exec = xrt::Executor::Create(params);
  ASSERT_TRUE(exec.ok()) << exec.status().ToString();
  const xpk::Executable& e = *(*a)->manifest().executables()->Get(0);
  auto io = [&](const char* name) {
    return reinterpret_cast<float*>((*exec)->Tensor(e, name).value());
  };

  const std::vector<float> in = Values(kM * kLda, 0.5f, -2.0f);
  const std::vector<float> acc = Values(kM * kLdAcc, -0.75f, 3.0f);
  const std::vector<float> c_before = Values(kM * kLdc, 1.5f, -4.0f);  // in place: the addend
  std::memcpy(io("a"), in.data(), in.size() * 4);
  std::memcpy(io("acc"), acc.data(), acc.size() * 4);
  std::memcpy(io("c"), c_before.data(), c_before.size() * 4);
  ASSERT_TRUE((*exec)->Run(e).ok());

  const float* c = io("c");
  for (int64_t r = 0; r < kM; ++r) {
    for (int64_t j = 0; j < kLdc; ++j) {
      if (j >= kN) {  // past n, inside ldc: untouched
        EXPECT_EQ(c[r * kLdc + j], c_before[r * kLdc + j]) << r << "," << j;
        continue;
      }
      double want = p.bias ? artifact.bias()[j] : 0.0;
      for (int64_t k = 0; k < kK; ++k) want += double(in[r * kLda + k]) * artifact.w()[j * kK + k];
      if (p.acc == Acc::kDisjoint) want += acc[r * kLdAcc + j];
      if (p.acc == Acc::kInPlace) want += c_before[r * kLdc + j];
      EXPECT_NEAR(c[r * kLdc + j], want, 1e-4 * (1 + std::abs(want))) << r << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Roles, MatmulByRole,
                         ::testing::Values(MatmulCase{false, Acc::kNone},
                                           MatmulCase{true, Acc::kNone},
                                           MatmulCase{false, Acc::kDisjoint},
                                           MatmulCase{true, Acc::kDisjoint},
                                           MatmulCase{true, Acc::kInPlace}),
                         MatmulCaseName);

// ---------------------------------------------------------------------------
// The loader rejects what breaks the contract, naming the role.

TEST(UkernelContract, LoaderNamesTheRole) {
  ContractArtifact artifact;
  const std::string where = "contract.xpk: executable 'lm_step_t3' command 0: ";
  {
    CommandSpec s = MatmulSpec(true, Acc::kDisjoint);
    s.iparams.pop_back();
    EXPECT_EQ(artifact.LoadError(s),
              where + "ukernel matmul takes 8 iparams, got 7 (missing ldacc)");
    s.iparams.resize(3);
    EXPECT_EQ(artifact.LoadError(s),
              where +
                  "ukernel matmul takes 8 iparams, got 3 (missing lda, ldc, accumulate, "
                  "has_bias, ldacc)");
    s.iparams.resize(9, 1);
    EXPECT_EQ(artifact.LoadError(s),
              where + "ukernel matmul takes 8 iparams, got 9 (nothing follows ldacc)");
  }
  {
    CommandSpec s = MatmulSpec(false, Acc::kNone);
    s.fparams = {1.0f};
    EXPECT_EQ(artifact.LoadError(s), where + "ukernel matmul takes 0 fparams, got 1");
  }
  {
    // The flags say bias and acc are bound: the bindings must say so too.
    CommandSpec s = MatmulSpec(true, Acc::kDisjoint);
    s.bindings.pop_back();
    EXPECT_EQ(artifact.LoadError(s), where +
                                         "matmul with has_bias 1 and accumulate 1 takes 5 "
                                         "bindings, got 4 (missing acc)");
    s = MatmulSpec(false, Acc::kNone);
    s.iparams[xpk::abi::Index(P::kHasBias)] = 1;
    EXPECT_EQ(artifact.LoadError(s), where +
                                         "matmul with has_bias 1 and accumulate 0 takes 4 "
                                         "bindings, got 3 (missing bias)");
    s = MatmulSpec(true, Acc::kNone);
    s.iparams[xpk::abi::Index(P::kHasBias)] = 0;
    EXPECT_EQ(artifact.LoadError(s), where +
                                         "matmul with has_bias 0 and accumulate 0 takes 3 "
                                         "bindings, got 4 (nothing follows c)");
    s.bindings.resize(6, s.bindings[0]);
    EXPECT_EQ(artifact.LoadError(s),
              where + "ukernel matmul takes 3 to 5 bindings, got 6 (a, w, c, [bias], [acc])");
  }
  {
    CommandSpec s = MatmulSpec(false, Acc::kNone);
    s.iparams[xpk::abi::Index(P::kK)] = 0;
    EXPECT_EQ(artifact.LoadError(s), where + "matmul k is 0 (must be >= 1)");
    s = MatmulSpec(false, Acc::kNone);
    s.iparams[xpk::abi::Index(P::kAccumulate)] = 2;
    EXPECT_EQ(artifact.LoadError(s), where + "matmul accumulate is 2 (must be 0 or 1)");
  }
  {
    CommandSpec s = MatmulSpec(false, Acc::kNone);
    s.ukernel = xpk::Ukernel::paged_attention;
    EXPECT_EQ(artifact.LoadError(s),
              where +
                  "ukernel paged_attention takes 10 bindings, got 3 (missing out, k_cache, "
                  "v_cache, slot_mapping, block_tables, seq_lens, query_start_loc)");
  }
}

// ---------------------------------------------------------------------------
// The emitter side: a command is complete and consistent before it is written.

TEST(UkernelContract, CommandNamesWhatIsMissing) {
  std::vector<int64_t> iparams;
  std::vector<float> fparams;
  std::vector<xpk::Binding> bindings;
  const xpk::Binding any(xpk::BindingKind::arena, 0, 0, 4);
  MatmulCommand u;
  u.Bind(B::kA, any);
  u.Bind(B::kC, any);
  EXPECT_EQ(u.Finish(&iparams, &fparams, &bindings), "matmul binding w is not bound");
  u.Bind(B::kW, any);
  for (P p : {P::kM, P::kN, P::kK, P::kLda, P::kLdc}) u.Set(p, 4);
  EXPECT_EQ(u.Finish(&iparams, &fparams, &bindings), "matmul iparam ldacc is not set");
  u.Set(P::kLdAcc, 0);
  u.Set(P::kHasBias, 1);
  EXPECT_EQ(u.Finish(&iparams, &fparams, &bindings),
            "matmul has_bias is 1 but binding bias is not bound");
  u.Bind(B::kBias, xpk::Binding(xpk::BindingKind::weight, 1, 0, 0));
  EXPECT_EQ(u.Finish(&iparams, &fparams, &bindings), "");
  // Flags follow the optional bindings bound.
  EXPECT_EQ(iparams, (std::vector<int64_t>{4, 4, 4, 4, 4, 0, 1, 0}));
  EXPECT_EQ(bindings.size(), 4u);
  EXPECT_TRUE(fparams.empty());

  xpk::abi::UkernelCommand<xpk::Ukernel::paged_attention, xpk::Binding> att;
  EXPECT_THAT(att.Finish(&iparams, &fparams, &bindings),
              HasSubstr("paged_attention binding q is not bound"));
}

// The executor's reader sees each role where the emitter put it, optional roles
// taking no slot when unbound.
TEST(UkernelContract, ViewReadsWhatTheCommandWrote) {
  using AP = xpk::abi::PagedAttentionParam;
  using AB = xpk::abi::PagedAttentionBinding;
  xpk::abi::UkernelCommand<xpk::Ukernel::paged_attention, xpk::Binding> u;
  for (int r = 0; r < xpk::abi::Index(AP::kCount); ++r) u.Set(static_cast<AP>(r), 100 + r);
  for (int r = 0; r < xpk::abi::Index(AB::kCount); ++r)
    u.Bind(static_cast<AB>(r), xpk::Binding(xpk::BindingKind::arena, 0, 64 * r, 4));
  u.Set(xpk::abi::PagedAttentionFParam::kScale, 0.125f);
  CommandSpec s;
  s.ukernel = xpk::Ukernel::paged_attention;
  ASSERT_EQ(u.Finish(&s.iparams, &s.fparams, &s.bindings), "");

  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(xpk::CreateCommandDirect(fbb, xpk::CommandKind::ukernel, 0, s.ukernel, 0, &s.bindings,
                                      &s.iparams, &s.fparams));
  const auto* command = flatbuffers::GetRoot<xpk::Command>(fbb.GetBufferPointer());
  xpk::abi::UkernelView<xpk::Ukernel::paged_attention> view(*command);
  EXPECT_EQ(view[AP::kNumTokens], 100);
  EXPECT_EQ(view[AP::kHeadDim], 100 + xpk::abi::Index(AP::kHeadDim));
  EXPECT_EQ(view[AP::kOutStride], 100 + xpk::abi::Index(AP::kOutStride));
  EXPECT_EQ(view[xpk::abi::PagedAttentionFParam::kScale], 0.125f);
  for (int r = 0; r < xpk::abi::Index(AB::kCount); ++r) {
    const int slot = view.Slot(static_cast<AB>(r));
    ASSERT_GE(slot, 0);
    EXPECT_EQ(command->bindings()->Get(slot)->offset(), 64u * r);
  }

  s = MatmulSpec(/*bias=*/false, Acc::kDisjoint);
  fbb.Clear();
  fbb.Finish(xpk::CreateCommandDirect(fbb, xpk::CommandKind::ukernel, 0, s.ukernel, 0, &s.bindings,
                                      &s.iparams));
  xpk::abi::UkernelView<xpk::Ukernel::matmul> mm(
      *flatbuffers::GetRoot<xpk::Command>(fbb.GetBufferPointer()));
  EXPECT_EQ(mm[P::kLdAcc], kLdAcc);
  EXPECT_EQ(mm[P::kHasBias], 0);
  EXPECT_EQ(mm.Slot(B::kC), 2);
  EXPECT_EQ(mm.Slot(B::kBias), -1);
  EXPECT_EQ(mm.Slot(B::kAcc), 3);
}

}  // namespace
}  // namespace xcc
