// Numerics of multi-LoRA serving against HF PEFT references.
//
// The tiny models of tests/fixtures/models with the PEFT adapters of
// tests/fixtures/lora (tests/gen_lora_fixtures.py) are compiled with
// --enable-lora (4 slots, rank 8) and run through the engine core:
//   - each adapter alone (and the base model): last-prompt-position logits
//     within 1e-4 of PEFT's and 32 greedy tokens equal to PEFT's; a request of
//     one adapter runs the single-adapter executables, the base model the
//     no-LoRA ones;
//   - one batch mixing three adapters and the base model, with a token budget
//     small enough that steps are prefill-only, mixed (decodes + prefill
//     chunks) and decode-only: every request equals its reference, and the
//     steps ran the mixed executables;
//   - adapters packed into the artifact at compile time give the same results
//     as adapters loaded at run time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "runtime/executor/model_runner.h"
#include "tests/numerics/fixture_io.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path Fixtures() { return fs::path(XCC_SOURCE_DIR) / "tests/fixtures"; }

using xcc::testing::ReadJson;

using xcc::testing::ReadF32;

// One reference: an adapter ("base" for none) on one prompt.
struct Case {
  std::string adapter;
  std::vector<int32_t> prompt;
  std::vector<float> last_logits;  // of the last prompt position
  std::vector<int32_t> greedy;
};

struct Reference {
  json j;
  std::map<std::string, std::vector<int32_t>> prompts;
  std::map<std::pair<std::string, std::string>, Case> cases;  // (adapter, prompt name)
};

Reference LoadReference(const std::string& model) {
  Reference r;
  const fs::path dir = Fixtures() / "lora" / model;
  r.j = ReadJson(dir / "reference.json");
  const int64_t vocab = r.j["vocab_size"].get<int64_t>();
  for (const json& p : r.j["prompts"]) r.prompts[p["name"]] = p["ids"].get<std::vector<int32_t>>();
  for (const json& a : r.j["adapters"]) {
    for (const json& res : a["results"]) {
      Case c;
      c.adapter = a["name"];
      c.prompt = r.prompts.at(res["prompt"]);
      const std::vector<float> all =
          ReadF32(dir / "logits" / res["logits"]["file"].get<std::string>());
      const size_t row = c.prompt.size() - 1;
      if (all.size() < (row + 1) * vocab) {
        ADD_FAILURE() << "short logits file " << res["logits"]["file"];
        continue;
      }
      c.last_logits.assign(all.begin() + row * vocab, all.begin() + (row + 1) * vocab);
      c.greedy = res["greedy_ids"].get<std::vector<int32_t>>();
      r.cases[{c.adapter, res["prompt"]}] = std::move(c);
    }
  }
  return r;
}

struct Options {
  int64_t max_num_batched_tokens = 64;
  std::vector<std::pair<std::string, std::string>> packed;  // --lora-modules
};

std::string Compile(const std::string& model, const std::string& tag, const Options& opt) {
  fs::path dir = fs::temp_directory_path() / ("xcc_lora_numerics_" + model);
  fs::create_directories(dir);
  xcc::CompileOptions o;
  o.model_path = (Fixtures() / "models" / model).string();
  o.output_path = (dir / (tag + ".xpk")).string();
  o.quiet = true;
  o.limits.max_num_seqs = 4;
  o.limits.max_model_len = 128;
  o.limits.max_num_batched_tokens = opt.max_num_batched_tokens;
  o.enable_lora = true;
  o.max_loras = 4;
  o.max_lora_rank = 8;
  o.lora_modules = opt.packed;
  auto s = xcc::Compile(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return o.output_path;
}

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> prompt_logits;
};

// Runs `requests` (adapter name or "base", prompt) together to completion,
// greedily; returns each one's output and the lm_step executables' LoRA modes
// by step kind ("prefill", "mixed", "decode").
struct BatchResult {
  std::vector<Output> outputs;
  std::map<std::string, std::set<std::string>> modes_by_step;
};
BatchResult RunBatch(xrt::ModelRunner& runner,
                     const std::vector<std::pair<std::string, std::vector<int32_t>>>& requests) {
  BatchResult r;
  r.outputs.resize(requests.size());
  xrt::EngineCoreParams cp = runner.engine_core_params();
  cp.enable_prefix_caching = false;
  auto core = xrt::EngineCore::Create(cp);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  if (!core.ok()) return r;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    xrt::EngineRequest req;
    req.request_id = "r" + std::to_string(i);
    req.prompt = requests[i].second;
    req.max_tokens = 32;
    req.ignore_eos = true;
    req.sampling.temperature = 0.0f;
    req.return_prompt_logits = true;
    if (requests[i].first != "base") {
      req.lora = runner.lora_registry()->Find(requests[i].first);
      EXPECT_NE(req.lora, nullptr) << requests[i].first;
    }
    index[req.request_id] = i;
    xrt::Status s = (*core)->AddRequest(std::move(req));
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (int steps = 0; (*core)->HasUnfinished(); ++steps) {
    if (steps == 500) {
      ADD_FAILURE() << "the batch did not finish in 500 steps";
      break;
    }
    xrt::EngineCoreOutputs out = (*core)->Step();
    EXPECT_TRUE(out.stats.error.ok()) << out.stats.error.ToString();
    const xrt::StepStats& st = out.stats;
    if (st.ran) {
      const char* kind = st.prompt_tokens == st.num_tokens ? "prefill"
                         : st.prompt_tokens == 0           ? "decode"
                                                           : "mixed";
      r.modes_by_step[kind].insert(xpk::EnumNameLoraMode(st.lora_mode));
      // The executable run is the variant of the step's mode.
      EXPECT_EQ(st.lm_step.find(st.lora_mode == xpk::LoraMode::none ? "_single" : "lm_step"),
                st.lora_mode == xpk::LoraMode::none ? std::string::npos : 0u)
          << st.lm_step;
    }
    for (const xrt::RequestOutput& o : out.outputs) {
      Output& dst = r.outputs[index.at(o.request_id)];
      if (!o.prompt_logits.empty()) dst.prompt_logits = o.prompt_logits;
      for (const xrt::GeneratedToken& t : o.tokens) dst.tokens.push_back(t.token);
      EXPECT_NE(o.finish_reason, "error") << o.error;
    }
  }
  return r;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void ExpectMatches(const Output& got, const Case& want, const std::string& what) {
  EXPECT_LE(MaxAbsDiff(got.prompt_logits, want.last_logits), 1e-4f)
      << what << ": last-position logits differ from PEFT";
  EXPECT_EQ(got.tokens, want.greedy) << what << ": greedy tokens differ from PEFT";
}

std::unique_ptr<xrt::ModelRunner> Runner(const std::string& path) {
  xrt::ModelRunnerParams rp;
  rp.artifact_path = path;
  rp.num_threads = 2;
  auto runner = xrt::ModelRunner::Create(rp);
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  return runner.ok() ? std::move(*runner) : nullptr;
}

void LoadAdapters(xrt::ModelRunner& runner, const std::string& model, const Reference& ref) {
  for (const json& a : ref.j["adapters"]) {
    if (a["dir"].is_null()) continue;
    const std::string name = a["name"];
    auto loaded = runner.lora_registry()->Load(name, (Fixtures() / "lora" / model / name).string());
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  }
}

class LoraNumerics : public ::testing::TestWithParam<std::string> {};

// Each adapter alone, on every prompt: the single-adapter executables (the
// base model: the no-LoRA ones) reproduce PEFT.
TEST_P(LoraNumerics, EachAdapterAloneMatchesPeft) {
  const std::string model = GetParam();
  const Reference ref = LoadReference(model);
  auto runner = Runner(Compile(model, "alone", {}));
  ASSERT_NE(runner, nullptr);
  LoadAdapters(*runner, model, ref);
  for (const auto& [key, c] : ref.cases) {
    SCOPED_TRACE(key.first + " on " + key.second);
    BatchResult r = RunBatch(*runner, {{c.adapter, c.prompt}});
    ASSERT_EQ(r.outputs.size(), 1u);
    ExpectMatches(r.outputs[0], c, key.first + "/" + key.second);
    const std::string mode = c.adapter == "base" ? "none" : "single";
    for (const auto& [kind, modes] : r.modes_by_step)
      EXPECT_EQ(modes, std::set<std::string>{mode}) << kind << " steps";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LoraNumerics, ::testing::Values("llama_gqa", "qwen2_bias"));

// The reference's mixed batch (three adapters and the base model) in one
// engine, with a 40-token budget: prefill-only, mixed and decode-only steps,
// all on the mixed executables.
TEST(LoraMixedBatch, ThreeAdaptersAndTheBaseModelInOneBatch) {
  const std::string model = "llama_gqa";
  const Reference ref = LoadReference(model);
  Options opt;
  opt.max_num_batched_tokens = 40;
  auto runner = Runner(Compile(model, "mixed", opt));
  ASSERT_NE(runner, nullptr);
  LoadAdapters(*runner, model, ref);
  std::vector<std::pair<std::string, std::vector<int32_t>>> requests;
  std::vector<const Case*> want;
  for (const json& e : ref.j["mixed_batch"]["entries"]) {
    const Case& c = ref.cases.at({e["adapter"], e["prompt"]});
    requests.push_back({c.adapter, c.prompt});
    want.push_back(&c);
  }
  BatchResult r = RunBatch(*runner, requests);
  ASSERT_EQ(r.outputs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ExpectMatches(r.outputs[i], *want[i], want[i]->adapter + " in the mixed batch");
  for (const char* kind : {"prefill", "mixed", "decode"}) {
    ASSERT_TRUE(r.modes_by_step.count(kind)) << "no " << kind << " step";
    EXPECT_TRUE(r.modes_by_step[kind].count("mixed")) << kind << " steps never ran mixed";
  }
}

// Prefix caching keys KV blocks by the adapter: the same prompt under another
// adapter (or none) shares no block, under the same adapter it does; every
// output still equals PEFT's.
TEST(LoraPrefixCaching, BlocksAreKeyedByTheAdapter) {
  const std::string model = "llama_gqa";
  const Reference ref = LoadReference(model);
  auto runner = Runner(Compile(model, "prefix", {}));
  ASSERT_NE(runner, nullptr);
  LoadAdapters(*runner, model, ref);
  xrt::EngineCoreParams cp = runner->engine_core_params();
  cp.enable_prefix_caching = true;
  auto core = xrt::EngineCore::Create(cp);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  const std::string prompt = "p33";  // 33 tokens: two full 16-token blocks
  int n = 0;
  auto run = [&](const std::string& adapter) {
    xrt::EngineRequest req;
    req.request_id = "r" + std::to_string(n++);
    req.prompt = ref.prompts.at(prompt);
    req.max_tokens = 32;
    req.ignore_eos = true;
    req.sampling.temperature = 0.0f;
    req.return_prompt_logits = true;
    if (adapter != "base") req.lora = runner->lora_registry()->Find(adapter);
    EXPECT_TRUE((*core)->AddRequest(std::move(req)).ok());
    Output out;
    int64_t cached = -1;
    for (int steps = 0; (*core)->HasUnfinished() && steps < 200; ++steps) {
      for (const xrt::RequestOutput& o : (*core)->Step().outputs) {
        if (!o.prompt_logits.empty()) out.prompt_logits = o.prompt_logits;
        for (const xrt::GeneratedToken& t : o.tokens) out.tokens.push_back(t.token);
        cached = o.cached_tokens;
      }
    }
    ExpectMatches(out, ref.cases.at({adapter, prompt}), adapter);
    return cached;
  };
  EXPECT_EQ(run("a_all_r8"), 0);
  EXPECT_EQ(run("base"), 0) << "the base model reused an adapter's KV blocks";
  EXPECT_EQ(run("b_qv_r4_rslora"), 0) << "an adapter reused another adapter's KV blocks";
  EXPECT_EQ(run("a_all_r8"), 32) << "the same adapter should reuse its two full blocks";
}

// Adapters packed into the artifact by `xcc compile --lora-modules` are
// registered at load and give PEFT's results.
TEST(LoraPacked, AdaptersPackedAtCompileTimeMatchPeft) {
  const std::string model = "llama_gqa";
  const Reference ref = LoadReference(model);
  Options opt;
  opt.packed = {{"packed_a", (Fixtures() / "lora" / model / "a_all_r8").string()},
                {"packed_b", (Fixtures() / "lora" / model / "b_qv_r4_rslora").string()}};
  auto runner = Runner(Compile(model, "packed", opt));
  ASSERT_NE(runner, nullptr);
  auto a = runner->lora_registry()->Find("packed_a");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->from_artifact);
  BatchResult r =
      RunBatch(*runner, {{"packed_a", ref.prompts.at("p17")}, {"packed_b", ref.prompts.at("p33")}});
  ASSERT_EQ(r.outputs.size(), 2u);
  ExpectMatches(r.outputs[0], ref.cases.at({"a_all_r8", "p17"}), "packed a_all_r8");
  ExpectMatches(r.outputs[1], ref.cases.at({"b_qv_r4_rslora", "p33"}), "packed b_qv_r4_rslora");
}

}  // namespace
