//===- check.cc - xcc check: coverage and staleness of an artifact -------===//
//
// Coverage is proven with the runtime's own InputBuilder: for every step size
// the serving limits allow (every num_tokens up to the token budget, every
// num_reqs up to max_num_seqs, and for a vision artifact every number of
// images one step can encode) a step is built exactly as the server would and
// must land in a compiled executable. Staleness re-hashes the inputs and
// compares them (and the compiler version) with the artifact's provenance.
// With LoRA served, every lm_step bucket a step can land in must have the LoRA
// variant a step with adapters runs (single, mixed), and the serving config's
// max_loras / max_lora_rank must fit the compiled ones.
// Integrity: the loader verified every code segment's checksum at open; a
// segment without a checksum (format 1.0) is a finding, and --verify-weights
// recomputes the checksums of the weights too.
//
//===----------------------------------------------------------------------===//
#include "compiler/check.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <fmt/ranges.h>

#include "compiler/artifact/sha256.h"
#include "compiler/compile.h"
#include "compiler/serving_model.h"
#include "llvm/Config/llvm-config.h"
#include "runtime/engine/artifact_params.h"
#include "runtime/engine/input_builder.h"
#include "runtime/loader/artifact.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

namespace xcc {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using xrt::Expected;
using xrt::Status;

std::string Range(int64_t lo, int64_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi);
}

// Calls `report(lo, hi)` for every maximal run of values in [1, n] for which
// `fails` is true.
template <typename F, typename R>
void ForEachFailingRun(int64_t n, F fails, R report) {
  int64_t start = 0;
  for (int64_t v = 1; v <= n + 1; ++v) {
    bool f = v <= n && fails(v);
    if (f && !start) start = v;
    if (!f && start) {
      report(start, v - 1);
      start = 0;
    }
  }
}

// Every number of images one step can encode must have a vision_encode bucket.
// The count is the engine's encoder budget (EngineCore::Create: whole images in
// max(max_num_batched_tokens, tokens_per_image) rows) WITHOUT its cap at the
// largest bucket, which is what would hide a missing bucket, and at most what
// the encoder cache holds and the running requests can carry (max_num_seqs x
// limit_mm_per_prompt), the other bounds on a step's images.
void CheckImageCoverage(const xrt::Artifact& a, const ServingConfig& config,
                        const xrt::InputBuilder& builder, CheckReport* r) {
  const xrt::ServingLimits& serving = config.limits;
  const xpk::VisionConfig* v = a.manifest().config()->vision();
  const int64_t compiled_images = a.manifest().limits()->max_images();
  if (!v) {
    if (config.limit_mm_per_prompt > 0)
      r->findings.push_back(
          {"coverage", fmt::format("limit_mm_per_prompt {}: the artifact has no vision encoder "
                                   "(a text-only model serves no images)",
                                   config.limit_mm_per_prompt)});
    return;
  }
  if (config.limit_mm_per_prompt > compiled_images)
    r->findings.push_back(
        {"coverage",
         fmt::format("limit_mm_per_prompt {} exceeds the {} images per prompt the "
                     "artifact was compiled for: recompile with "
                     "--limit-mm-per-prompt {}",
                     config.limit_mm_per_prompt, compiled_images, config.limit_mm_per_prompt)});
  const int64_t tpi = v->tokens_per_image(), cache_rows = v->encoder_cache_rows();
  if (tpi >= 1 && cache_rows < tpi) {
    r->findings.push_back(
        {"coverage", fmt::format("the encoder cache of {} rows is smaller than one image ({} "
                                 "tokens per image): no image can be encoded; recompile with "
                                 "--encoder-cache-size {} or more (0: automatic)",
                                 cache_rows, tpi, tpi)});
    return;
  }
  Expected<std::optional<xrt::VisionParams>> vision = xrt::VisionParamsOf(a);
  if (!vision.ok()) {
    r->findings.push_back({"integrity", vision.status().message()});
    return;
  }
  const std::vector<int64_t>& buckets = (*vision)->image_buckets;
  r->vision_encode_buckets = buckets;
  const int64_t budget = std::max(serving.max_num_batched_tokens, tpi) / tpi;
  const int64_t cache_images = cache_rows / tpi;
  const int64_t carried = std::min(serving.max_num_seqs, xrt::CompiledLimitsOf(a).max_num_seqs) *
                          config.limit_mm_per_prompt;
  const int64_t max_images = std::min({budget, cache_images, carried});
  std::string bound = fmt::format(
      "encoder budget max(max_num_batched_tokens = {}, {}) / {} tokens "
      "per image = {} images",
      serving.max_num_batched_tokens, tpi, tpi, budget);
  if (cache_images < budget)
    bound += fmt::format(", encoder cache {} rows = {} images", cache_rows, cache_images);
  if (carried < budget)
    bound += fmt::format(", max_num_seqs x limit_mm_per_prompt = {} images", carried);
  r->images_per_step = max_images;
  r->notes.push_back(
      fmt::format("vision_encode buckets [{}]; a step encodes at most {} images ({})",
                  fmt::join(buckets, ","), max_images, bound));
  xrt::StepInputs in;
  std::vector<const std::vector<float>*> pixels;
  std::vector<int64_t> rows;
  auto image_step_fails = [&](int64_t n) {
    pixels.assign(static_cast<size_t>(n), nullptr);
    rows.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rows[i] = i * tpi;
    return !builder.BuildImages(pixels, rows, &in).ok();
  };
  ForEachFailingRun(max_images, image_step_fails, [&](int64_t lo, int64_t hi) {
    r->findings.push_back(
        {"coverage",
         fmt::format("num_images {}: no vision_encode bucket holds these steps (largest compiled "
                     "bucket {}; {}): recompile with --image-buckets {} (any list up to {}) or "
                     "a lower --max-num-batched-tokens",
                     Range(lo, hi), buckets.back(), bound,
                     fmt::join(xrt::DefaultImageBuckets(max_images), ","), max_images)});
  });
  if (max_images > 0)
    r->notes.push_back(fmt::format("checked num_images 1..{} through InputBuilder", max_images));
}

// "xcc compile --enable-lora --max-loras N --max-lora-rank R [--lora-target-modules ...]"
// for serving `config` (and at least what `lora` was compiled with).
std::string LoraRecompileFlags(const xpk::LoraConfig* lora, const ServingConfig& config) {
  std::string flags = fmt::format("xcc compile --enable-lora --max-loras {} --max-lora-rank {}",
                                  std::max(config.max_loras, lora ? lora->max_loras() : 0),
                                  std::max(config.max_lora_rank, lora ? lora->max_lora_rank() : 0));
  if (lora && lora->target_modules() && lora->target_modules()->size() < 7) {
    std::vector<std::string> modules;
    for (const flatbuffers::String* m : *lora->target_modules()) modules.push_back(m->str());
    flags += fmt::format(" --lora-target-modules {}", fmt::join(modules, ","));
  }
  return flags;
}

// The serving config's LoRA against the compiled LoRA config. Returns whether
// the LoRA variants are to be checked (LoRA compiled in and served).
bool CheckLoraLimits(const xrt::Artifact& a, const ServingConfig& config, CheckReport* r) {
  const xpk::LoraConfig* lora = a.manifest().lora();
  if (!config.enable_lora) {
    if (lora)
      r->notes.push_back(
          "LoRA: compiled in, but the serving config sets enable-lora false: its variants "
          "are not checked");
    return false;
  }
  if (!lora) {
    r->findings.push_back(
        {"coverage",
         fmt::format("the serving config enables LoRA (max_loras {}, max_lora_rank {}), but the "
                     "artifact was compiled without LoRA: recompile with {}",
                     config.max_loras, config.max_lora_rank, LoraRecompileFlags(lora, config))});
    return false;
  }
  if (config.max_loras > lora->max_loras())
    r->findings.push_back(
        {"coverage",
         fmt::format("max_loras {} exceeds the {} adapter slots the artifact was "
                     "compiled with (the most distinct adapters one batch can hold): "
                     "recompile with {}",
                     config.max_loras, lora->max_loras(), LoraRecompileFlags(lora, config))});
  if (config.max_lora_rank > lora->max_lora_rank())
    r->findings.push_back(
        {"coverage",
         fmt::format("max_lora_rank {} exceeds the rank {} the artifact was compiled for "
                     "(adapters of a higher rank cannot be loaded): recompile with {}",
                     config.max_lora_rank, lora->max_lora_rank(),
                     LoraRecompileFlags(lora, config))});
  std::vector<std::string> modules;
  if (lora->target_modules())
    for (const flatbuffers::String* m : *lora->target_modules()) modules.push_back(m->str());
  r->notes.push_back(fmt::format(
      "LoRA: {} slots of rank {} on [{}] ({} targets), {} packed adapters; served at max_loras "
      "{}, max_lora_rank {}",
      lora->max_loras(), lora->max_lora_rank(), fmt::join(modules, ","),
      lora->targets() ? lora->targets()->size() : 0,
      lora->adapters() ? lora->adapters()->size() : 0, config.max_loras, config.max_lora_rank));
  return true;
}

// Every step with adapters runs the single or mixed variant of its lm_step
// bucket. Built through InputBuilder as the engine builds them, for every
// num_tokens n: one request of n tokens with an adapter (single), and a decode
// with an adapter beside n-1 prompt tokens of the base model (mixed; needs n >=
// 2 and two requests per step). Each missing variant is one finding naming the
// bucket, the mode and the step sizes it would hold.
void CheckLoraModeCoverage(const xrt::Artifact& a, const ServingConfig& config,
                           const xrt::InputBuilder& builder, int64_t max_reqs, CheckReport* r) {
  const xrt::ServingLimits compiled = xrt::CompiledLimitsOf(a);
  const int64_t bs = compiled.block_size;
  const std::set<std::string> lm_steps = LmStepExecutablesOf(a);
  std::vector<int32_t> tokens(static_cast<size_t>(config.limits.max_num_batched_tokens), 1);
  std::vector<int32_t> decode_table = {0}, prompt_table;
  // (bucket, mode) -> the step sizes n it lacks for.
  std::map<std::pair<int64_t, xpk::LoraMode>, std::pair<int64_t, int64_t>> missing;
  xrt::StepInputs in;
  auto try_step = [&](int64_t n, const std::vector<xrt::ScheduledRequest>& step) {
    if (!builder.Build(step, &in).ok()) return;  // a plain gap: reported as num_tokens
    const std::string name =
        xpk::abi::ExecutableName(xpk::ExecutableKind::lm_step, in.token_bucket, in.lora_mode);
    if (lm_steps.count(name)) return;
    auto [it, added] = missing.try_emplace({in.token_bucket, in.lora_mode}, n, n);
    it->second.first = std::min(it->second.first, n);
    it->second.second = std::max(it->second.second, n);
  };
  for (int64_t n = 1; n <= config.limits.max_num_batched_tokens; ++n) {
    xrt::ScheduledRequest adapter;
    adapter.token_ids = tokens.data();
    adapter.needs_logits = true;
    adapter.lora_slot = 0;
    prompt_table.assign(static_cast<size_t>((n + bs - 1) / bs), 0);
    if (static_cast<int64_t>(prompt_table.size()) > compiled.max_blocks_per_req) break;
    adapter.num_tokens = n;
    adapter.block_table = &prompt_table;
    try_step(n, {adapter});
    if (n < 2 || max_reqs < 2) continue;
    adapter.num_tokens = 1;
    adapter.block_table = &decode_table;
    xrt::ScheduledRequest base = adapter;
    base.lora_slot = -1;
    base.num_tokens = n - 1;
    base.block_table = &prompt_table;
    try_step(n, {adapter, base});
  }
  for (const auto& [key, sizes] : missing) {
    const auto [bucket, mode] = key;
    r->findings.push_back(
        {"coverage",
         fmt::format("lm_step bucket {} has no {} LoRA variant ({}): steps of {} tokens with {} "
                     "cannot run; recompile with {}",
                     bucket, xpk::EnumNameLoraMode(mode),
                     xpk::abi::ExecutableName(xpk::ExecutableKind::lm_step, bucket, mode),
                     Range(sizes.first, sizes.second),
                     mode == xpk::LoraMode::single
                         ? "one adapter for every token"
                         : "several adapters, or an adapter and the base model,",
                     LoraRecompileFlags(a.manifest().lora(), config))});
  }
  r->notes.push_back(
      fmt::format("checked the LoRA variants (single{}) of num_tokens 1..{} through InputBuilder",
                  max_reqs >= 2 ? ", mixed" : "; one request per step: never mixed",
                  config.limits.max_num_batched_tokens));
}

void CheckCoverage(const xrt::Artifact& a, const ServingConfig& config, CheckReport* r) {
  const xrt::ServingLimits& serving = config.limits;
  const xrt::ServingLimits compiled = xrt::CompiledLimitsOf(a);
  const xrt::CompiledBuckets compiled_buckets = xrt::CompiledBucketsOf(a);
  const std::vector<int64_t>& token_buckets = compiled_buckets.tokens;
  const std::vector<int64_t>& req_buckets = compiled_buckets.reqs;
  r->notes.push_back(fmt::format(
      "serving limits: max_num_seqs {}, max_num_batched_tokens {}, max_model_len {}; compiled "
      "lm_step buckets [{}], lm_logits buckets [{}]",
      serving.max_num_seqs, serving.max_num_batched_tokens, serving.max_model_len,
      fmt::join(token_buckets, ","), fmt::join(req_buckets, ",")));
  if (token_buckets.empty() || req_buckets.empty()) {
    r->findings.push_back({"coverage", "the artifact has no lm_step or no lm_logits executable"});
    return;
  }

  // Limits baked into every executable's shapes, checked as xrt run checks
  // its flags. A token budget beyond the compiled one shows below as the
  // num_tokens no bucket holds.
  for (const xrt::LimitExcess& e : xrt::LimitsBeyondCompiled(compiled, serving))
    if (e.field != "max_num_batched_tokens") r->findings.push_back({"coverage", e.message});

  auto buckets = xrt::BucketTable::Create(token_buckets, req_buckets, compiled_buckets.images);
  if (!buckets.ok()) {
    r->findings.push_back({"coverage", buckets.status().message()});
    return;
  }
  auto builder = xrt::InputBuilder::ForCompiled(compiled, *buckets);
  if (!builder.ok()) {
    r->findings.push_back({"coverage", builder.status().message()});
    return;
  }
  xrt::StepInputs in;
  const int64_t bs = compiled.block_size;

  // Every token count a step can hold: one request's prefill chunk of n tokens
  // (the largest per-step shape for that n), sampling at its end.
  std::vector<int32_t> tokens(static_cast<size_t>(serving.max_num_batched_tokens), 1);
  std::vector<int32_t> table;
  auto token_step_fails = [&](int64_t n) {
    table.assign(static_cast<size_t>((n + bs - 1) / bs), 0);
    if (static_cast<int64_t>(table.size()) > compiled.max_blocks_per_req)
      return false;  // reported above
    xrt::ScheduledRequest s;
    s.token_ids = tokens.data();
    s.num_tokens = n;
    s.block_table = &table;
    s.needs_logits = true;
    return !builder->Build({s}, &in).ok();
  };
  ForEachFailingRun(serving.max_num_batched_tokens, token_step_fails, [&](int64_t lo, int64_t hi) {
    r->findings.push_back(
        {"coverage",
         fmt::format("num_tokens {}: no lm_step bucket holds these steps (largest compiled "
                     "bucket {}; limit max_num_batched_tokens = {})",
                     Range(lo, hi), token_buckets.back(), serving.max_num_batched_tokens)});
  });
  r->notes.push_back(
      fmt::format("checked num_tokens 1..{} through InputBuilder", serving.max_num_batched_tokens));

  // Every request count: r decodes sampling at once.
  const int64_t max_reqs =
      std::min({serving.max_num_seqs, serving.max_num_batched_tokens, compiled.max_num_seqs});
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(max_reqs), std::vector<int32_t>{0});
  auto req_step_fails = [&](int64_t n) {
    std::vector<xrt::ScheduledRequest> step(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      step[i].token_ids = tokens.data();
      step[i].num_tokens = 1;
      step[i].block_table = &tables[i];
      step[i].needs_logits = true;
    }
    return !builder->Build(step, &in).ok();
  };
  ForEachFailingRun(max_reqs, req_step_fails, [&](int64_t lo, int64_t hi) {
    r->findings.push_back(
        {"coverage", fmt::format("num_reqs {}: no lm_logits bucket holds these steps (largest "
                                 "compiled bucket {}; limit max_num_seqs = {})",
                                 Range(lo, hi), req_buckets.back(), serving.max_num_seqs)});
  });
  r->notes.push_back(fmt::format("checked num_reqs 1..{} through InputBuilder", max_reqs));
  if (CheckLoraLimits(a, config, r)) CheckLoraModeCoverage(a, config, *builder, max_reqs, r);
  CheckImageCoverage(a, config, *builder, r);
}

bool IsModelInput(const fs::path& p) {
  const std::string name = p.filename().string();
  auto ends = [&](const char* s) {
    std::string suffix(s);
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".safetensors") || ends(".gguf") || name == "config.json" ||
         name == "generation_config.json" || ends(".index.json") || name == "tokenizer.json" ||
         name == "tokenizer_config.json" || name.rfind("chat_template", 0) == 0 ||
         name == "preprocessor_config.json" || name == "processor_config.json";
}

// The files of a PEFT adapter directory that are inputs of an artifact.
constexpr const char* kAdapterFiles[] = {"adapter_config.json", "adapter_model.safetensors"};

// "a, b" for adapters named a and b, or "none".
std::string AdapterNames(const std::map<std::string, std::string>& adapters) {
  std::string names;
  for (const auto& [name, path] : adapters) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "none" : names;
}

Status CheckStaleness(const xrt::Artifact& a, const std::vector<std::string>& inputs,
                      CheckReport* r) {
  const xrt::ArtifactProvenance prov = a.provenance();
  if (prov.compiler_version != kXccVersion)
    r->findings.push_back({"stale", fmt::format("compiled by xcc {}, this is xcc {}: recompile",
                                                prov.compiler_version, kXccVersion)});
  if (prov.llvm_version != LLVM_VERSION_STRING)
    r->findings.push_back(
        {"stale", fmt::format("compiled with LLVM {}, this xcc uses {}: recompile",
                              prov.llvm_version, LLVM_VERSION_STRING)});
  // Each format minor is a change in what xcc writes (schemas/artifact.fbs lists
  // them); an older one still loads, but is not what this xcc makes of the same
  // inputs (1.12 / 1.13: a bf16 artifact's vision / decoder attention computes in bf16).
  const uint32_t minor = a.header().format_minor;
  if (minor < xrt::kXpkFormatMinor)
    r->findings.push_back(
        {"stale",
         fmt::format("written in artifact format {}.{}, this xcc writes {}.{} (the "
                     "changes are listed in schemas/artifact.fbs): recompile",
                     a.header().format_major, minor, xrt::kXpkFormatMajor, xrt::kXpkFormatMinor)});
  if (minor > xrt::kXpkFormatMinor)
    r->findings.push_back(
        {"stale",
         fmt::format("written in artifact format {}.{} by a newer xcc, this one writes "
                     "{}.{}: check it with the xcc that wrote it, or recompile",
                     a.header().format_major, minor, xrt::kXpkFormatMajor, xrt::kXpkFormatMinor)});
  if (inputs.empty()) return Status::Ok();

  // Packed adapters (--lora-modules): their files are keyed "NAME/file" (every
  // adapter has an adapter_config.json), model files by their name (model
  // directories are flat).
  std::map<std::string, std::string> adapter_paths;  // name -> path as compiled
  if (const xpk::LoraConfig* lora = a.manifest().lora(); lora && lora->adapters())
    for (const xpk::LoraAdapter* ad : *lora->adapters())
      adapter_paths[ad->name()->str()] = ad->path() ? ad->path()->str() : "";
  auto last_component = [](const std::string& path) {
    fs::path p = fs::path(path).lexically_normal();
    return (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
  };

  // The files given now.
  std::map<std::string, fs::path> current;
  for (const std::string& in : inputs) {
    std::error_code ec;
    std::string adapter, dir;
    if (const size_t eq = in.find('='); eq != std::string::npos && !fs::exists(in, ec)) {
      adapter = in.substr(0, eq);
      dir = in.substr(eq + 1);
      if (!adapter_paths.count(adapter))
        return xrt::InvalidArgumentError(
            "--inputs {}: the artifact has no packed adapter '{}' (packed: {})", in, adapter,
            AdapterNames(adapter_paths));
    } else if (fs::is_regular_file(fs::path(in) / kAdapterFiles[0], ec)) {
      std::vector<std::string> names;
      for (const auto& [name, path] : adapter_paths)
        if (last_component(path) == last_component(in)) names.push_back(name);
      if (names.size() != 1)
        return xrt::InvalidArgumentError(
            "--inputs {}: a PEFT adapter directory {}; give it as NAME=DIR (packed: {})", in,
            names.empty() ? "that no packed adapter was compiled from"
                          : "of several packed adapters",
            AdapterNames(adapter_paths));
      adapter = names[0];
      dir = in;
    }
    if (!adapter.empty()) {
      if (!fs::is_directory(dir, ec))
        return xrt::NotFoundError("--inputs {}: no such directory {}", in, dir);
      for (const char* file : kAdapterFiles)
        if (fs::is_regular_file(fs::path(dir) / file, ec))
          current[adapter + "/" + file] = fs::path(dir) / file;
    } else if (fs::is_directory(in, ec)) {
      for (const auto& entry : fs::directory_iterator(in, ec))
        if (entry.is_regular_file() && IsModelInput(entry.path()))
          current[entry.path().filename().string()] = entry.path();
    } else if (fs::is_regular_file(in, ec)) {
      current[fs::path(in).filename().string()] = in;
    } else {
      return xrt::NotFoundError("--inputs {}: no such file or directory", in);
    }
  }
  std::map<std::string, const xrt::ArtifactProvenance::Input*> recorded;
  std::set<const xrt::ArtifactProvenance::Input*> of_adapters;
  for (const auto& [name, path] : adapter_paths)
    for (const char* file : kAdapterFiles)
      for (const auto& in : prov.inputs)
        if (in.path == path + "/" + file) {
          recorded[name + "/" + file] = &in;
          of_adapters.insert(&in);
        }
  for (const auto& in : prov.inputs)
    if (!of_adapters.count(&in)) recorded[fs::path(in.path).filename().string()] = &in;

  int64_t same = 0;
  for (const auto& [name, rec] : recorded) {
    auto it = current.find(name);
    if (it == current.end()) {
      const size_t slash = name.find('/');
      r->findings.push_back(
          {"stale",
           fmt::format("input {} ({}) is no longer present{}", name, rec->role,
                       slash == std::string::npos || !adapter_paths.count(name.substr(0, slash))
                           ? ""
                           : fmt::format(" (give adapter {0}'s directory as --inputs {0}=DIR)",
                                         name.substr(0, slash)))});
      continue;
    }
    XRT_ASSIGN_OR_RETURN(std::string sha, Sha256File(it->second.string()));
    std::error_code ec;
    const uint64_t size = fs::file_size(it->second, ec);
    if (sha != rec->sha256) {
      r->findings.push_back(
          {"stale", fmt::format("input {} changed: {} bytes sha256 {} at compile time, now {} "
                                "bytes sha256 {}: recompile",
                                it->second.string(), rec->size, rec->sha256.substr(0, 16), size,
                                sha.substr(0, 16))});
    } else {
      ++same;
    }
  }
  for (const auto& [name, path] : current)
    if (!recorded.count(name))
      r->findings.push_back(
          {"stale",
           fmt::format("input {} was not an input of the artifact: recompile", path.string())});
  r->notes.push_back(fmt::format("re-hashed {} inputs: {} unchanged", current.size(), same));
  return Status::Ok();
}

void CheckIntegrity(const xrt::Artifact& a, bool verifyWeights, CheckReport* r) {
  const auto* segments = a.manifest().segments();
  uint64_t checked_bytes = 0;
  int64_t checked = 0;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 0; segments && i < segments->size(); ++i) {
    const xpk::Segment* s = segments->Get(i);
    const bool code = s->kind() == xpk::SegmentKind::code;
    if (!code && !verifyWeights) continue;
    if (s->checksum_algorithm() == xpk::ChecksumAlgorithm::none) {
      r->findings.push_back(
          {"integrity",
           fmt::format("segment {} ({}) has no checksum (artifact format {}.{}): "
                       "{}; recompile",
                       i, xpk::EnumNameSegmentKind(s->kind()), a.header().format_major,
                       a.header().format_minor,
                       code ? "its code is loaded unverified" : "its bytes cannot be verified")});
      continue;
    }
    if (code) {
      r->notes.push_back(
          fmt::format("segment {} (code): checksum verified when the artifact "
                      "was opened",
                      i));
      continue;
    }
    ++checked;
    checked_bytes += s->size();
    Status v = a.VerifySegment(i);
    if (!v.ok()) r->findings.push_back({"integrity", v.message()});
  }
  if (verifyWeights) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r->notes.push_back(
        fmt::format("recomputed the checksums of {} weights segment(s) ({} "
                    "bytes) in {:.2f} s",
                    checked, checked_bytes, seconds));
  }
}

Status CheckTrace(const xrt::Artifact& a, const ServingConfig& config, const std::string& path,
                  CheckReport* r) {
  XRT_ASSIGN_OR_RETURN(std::vector<xrt::TraceRequest> trace, ReadTraceFor(a, config, path));
  for (size_t i = 0; i < trace.size(); ++i)
    if (static_cast<int64_t>(trace[i].images.size()) > config.limit_mm_per_prompt)
      r->findings.push_back(
          {"coverage", fmt::format("replay: trace request {} has {} images, more than "
                                   "limit_mm_per_prompt {}: the server rejects it",
                                   i + 1, trace[i].images.size(), config.limit_mm_per_prompt)});
  const xrt::CompiledBuckets compiled = xrt::CompiledBucketsOf(a);
  XRT_ASSIGN_OR_RETURN(xrt::BucketTable buckets,
                       xrt::BucketTable::Create(compiled.tokens, compiled.reqs, compiled.images));
  XRT_ASSIGN_OR_RETURN(xrt::ReplayParams p, ReplayParamsFor(a, config, std::move(buckets)));
  p.lm_step_executables = LmStepExecutablesOf(a);
  XRT_ASSIGN_OR_RETURN(xrt::ReplayReport rep, xrt::Replay(p, trace));
  std::string hist;
  for (const auto& [exe, n] : rep.bucket_hits)
    hist += fmt::format("{}{}: {} (padding {})", hist.empty() ? "" : ", ", exe, n,
                        rep.padding.count(exe) ? rep.padding.at(exe) : 0);
  r->notes.push_back(
      fmt::format("replayed {} requests of {} in {} steps, {} preemptions; bucket "
                  "histogram: {}",
                  trace.size(), path, rep.steps, rep.preemptions, hist));
  if (!compiled.images.empty()) {
    r->notes.push_back(
        fmt::format("replay images: {} encoded; encoder cache {} hits, {} misses, {} evictions",
                    rep.images_encoded, rep.encoder_cache_hits, rep.encoder_cache_misses,
                    rep.encoder_cache_evictions));
    r->replay_images_encoded = rep.images_encoded;
    r->replay_encoder_cache_hits = rep.encoder_cache_hits;
    r->replay_encoder_cache_misses = rep.encoder_cache_misses;
    r->replay_encoder_cache_evictions = rep.encoder_cache_evictions;
  }
  if (p.lora.max_loras > 0) {
    std::string modes;
    for (const char* mode : {"none", "single", "mixed"})
      if (rep.lora_mode_steps.count(mode))
        modes +=
            fmt::format("{}{} {}", modes.empty() ? "" : ", ", rep.lora_mode_steps.at(mode), mode);
    r->notes.push_back(fmt::format(
        "replay LoRA: steps by lm_step variant: {}; {} adapter loads into a slot, {} "
        "swaps ({} slots)",
        modes.empty() ? "none ran" : modes, rep.lora_loads, rep.lora_swaps, p.lora.max_loras));
    r->replay_lora_mode_steps = rep.lora_mode_steps;
    r->replay_lora_loads = rep.lora_loads;
    r->replay_lora_swaps = rep.lora_swaps;
    r->replay_lora = true;
  }
  for (const std::string& u : rep.unbucketed) r->findings.push_back({"coverage", "replay: " + u});
  r->replay_bucket_hits = rep.bucket_hits;
  r->replay_padding = rep.padding;
  return Status::Ok();
}

}  // namespace

Expected<CheckReport> RunCheck(const CheckOptions& o) {
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<xrt::Artifact> artifact,
                       xrt::Artifact::Open(o.artifact_path));
  XRT_ASSIGN_OR_RETURN(ServingConfig serving, LoadServingConfig(*artifact, o.serving_config_path));
  CheckReport report;
  CheckCoverage(*artifact, serving, &report);
  CheckIntegrity(*artifact, o.verify_weights, &report);
  XRT_RETURN_IF_ERROR(CheckStaleness(*artifact, o.inputs, &report));
  if (!o.trace_path.empty())
    XRT_RETURN_IF_ERROR(CheckTrace(*artifact, serving, o.trace_path, &report));
  return report;
}

ordered_json CheckReport::ToJson() const {
  ordered_json j;
  j["ok"] = findings.empty();
  j["findings"] = ordered_json::array();
  for (const CheckFinding& f : findings)
    j["findings"].push_back({{"kind", f.kind}, {"message", f.message}});
  j["notes"] = notes;
  if (!vision_encode_buckets.empty()) {
    j["vision_encode"]["buckets"] = vision_encode_buckets;
    j["vision_encode"]["images_per_step"] = images_per_step;
  }
  if (!replay_bucket_hits.empty()) {
    j["replay"]["bucket_hits"] = replay_bucket_hits;
    j["replay"]["padding"] = replay_padding;
    if (!vision_encode_buckets.empty()) {
      j["replay"]["images_encoded"] = replay_images_encoded;
      j["replay"]["encoder_cache"] = {{"hits", replay_encoder_cache_hits},
                                      {"misses", replay_encoder_cache_misses},
                                      {"evictions", replay_encoder_cache_evictions}};
    }
    if (replay_lora) {
      ordered_json& lora = j["replay"]["lora"];
      lora["steps_by_mode"] = ordered_json::object();
      for (const char* mode : {"none", "single", "mixed"})
        lora["steps_by_mode"][mode] =
            replay_lora_mode_steps.count(mode) ? replay_lora_mode_steps.at(mode) : 0;
      lora["loads"] = replay_lora_loads;
      lora["swaps"] = replay_lora_swaps;
    }
  }
  return j;
}

std::string CheckReport::ToText() const {
  std::string s;
  for (const std::string& n : notes) s += "  " + n + "\n";
  for (const CheckFinding& f : findings) s += fmt::format("FAIL [{}] {}\n", f.kind, f.message);
  s += findings.empty() ? "OK: every step shape is compiled and the artifact is up to date\n"
                        : fmt::format("{} finding(s)\n", findings.size());
  return s;
}

}  // namespace xcc
