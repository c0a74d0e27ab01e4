// The two artifacts every decoder fixture is checked through, for the numerics tests.
#pragma once

#include <filesystem>
#include <string>

#include "compiler/compile.h"
#include "tests/numerics/fixture_io.h"

namespace xcc::testing {

struct DecoderArtifacts {
  std::string wide;     // buckets 16..128, budget 128
  std::string chunked;  // one 16-token bucket, budget 16: prompts prefilled in chunks
};

// Compiles decoder fixture `name` (kDecoderFixtures) with --compute `compute` and
// --weight-dtype `weight_dtype` into
// <tmp>/xcc_numerics_[<tag>_][<compute>_][<weight_dtype>_]<name>/{wide,chunked}.xpk
// (each test its own `tag` where the other options match another test's: ctest
// runs the tests in parallel).
inline xrt::Expected<DecoderArtifacts> CompileDecoderFixture(
    const std::string& name, const std::string& compute = "f32",
    const std::string& weight_dtype = "auto", const std::string& tag = "") {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() /
      ("xcc_numerics_" + (tag.empty() ? "" : tag + "_") + (compute == "f32" ? "" : compute + "_") +
       (weight_dtype == "auto" ? "" : weight_dtype + "_") + FixtureParamName(name));
  fs::create_directories(dir);
  DecoderArtifacts a{(dir / "wide.xpk").string(), (dir / "chunked.xpk").string()};
  CompileOptions o;
  o.model_path = DecoderModelPath(name).string();
  o.quiet = true;
  o.compute = compute;
  o.weight_dtype = weight_dtype;
  o.limits.max_num_seqs = 4;
  o.limits.max_model_len = 256;
  o.limits.max_num_batched_tokens = 128;
  o.output_path = a.wide;
  XRT_RETURN_IF_ERROR(Compile(o).status());
  o.limits.max_num_batched_tokens = 16;
  o.token_buckets = {16};
  o.output_path = a.chunked;
  XRT_RETURN_IF_ERROR(Compile(o).status());
  return a;
}

}  // namespace xcc::testing
