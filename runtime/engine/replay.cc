#include "runtime/engine/replay.h"

#include <algorithm>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/base/json_parse.h"
#include "schemas/abi.h"

namespace xrt {

namespace {

// One image of a trace line before its placeholder run is inserted.
struct TraceImage {
  int64_t offset = 0;  // before this text token
  uint64_t content = 0;
};

// Reads the images of trace line `j` (ReadTrace's format) into *out; `contents`
// numbers the content ids seen so far.
Status ReadTraceImages(const nlohmann::json& j, const TraceImageParams& p, const std::string& where,
                       std::map<std::string, uint64_t>* contents, uint64_t* next_content,
                       std::vector<TraceImage>* out) {
  const bool listed = j.contains("images"), counted = j.contains("num_images");
  if (!listed && !counted) {
    if (j.contains("image_tokens"))
      return InvalidArgumentError("{}: 'image_tokens' needs 'num_images'", where);
    return Status::Ok();
  }
  if (listed && counted)
    return InvalidArgumentError("{}: give either 'images' or 'num_images', not both", where);
  auto check_tokens = [&](const nlohmann::json& v, const std::string& field) -> Status {
    if (!v.is_number_integer())
      return InvalidArgumentError("{}: '{}' must be an integer", where, field);
    if (v.get<int64_t>() != p.tokens_per_image)
      return InvalidArgumentError(
          "{}: '{}' is {}, but the artifact's images have {} tokens (tokens_per_image)", where,
          field, v.get<int64_t>(), p.tokens_per_image);
    return Status::Ok();
  };
  auto no_vision = [&](const char* field) {
    return InvalidArgumentError("{}: '{}': the artifact has no vision encoder", where, field);
  };
  if (counted) {
    const nlohmann::json& n = j["num_images"];
    if (!n.is_number_integer() || n.get<int64_t>() < 0)
      return InvalidArgumentError("{}: 'num_images' must be a non-negative integer", where);
    if (n.get<int64_t>() > 0 && p.tokens_per_image < 1) return no_vision("num_images");
    if (j.contains("image_tokens"))
      XRT_RETURN_IF_ERROR(check_tokens(j["image_tokens"], "image_tokens"));
    for (int64_t i = 0; i < n.get<int64_t>(); ++i) out->push_back({0, (*next_content)++});
    return Status::Ok();
  }
  if (j.contains("image_tokens"))
    return InvalidArgumentError(
        "{}: 'image_tokens' needs 'num_images' (with 'images', give "
        "each image's 'tokens')",
        where);
  const nlohmann::json& images = j["images"];
  if (!images.is_array()) return InvalidArgumentError("{}: 'images' must be an array", where);
  if (!images.empty() && p.tokens_per_image < 1) return no_vision("images");
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string at = fmt::format("{}: images[{}]", where, i);
    const nlohmann::json& image = images[i];
    if (!image.is_object()) return InvalidArgumentError("{}: not a JSON object", at);
    for (const auto& [key, value] : image.items())
      if (key != "id" && key != "tokens" && key != "offset")
        return InvalidArgumentError("{}: unknown key '{}' (known: id, tokens, offset)", at, key);
    if (image.contains("tokens"))
      XRT_RETURN_IF_ERROR(check_tokens(image["tokens"], fmt::format("images[{}].tokens", i)));
    TraceImage t;
    if (image.contains("offset")) {
      if (!image["offset"].is_number_integer() || image["offset"].get<int64_t>() < 0)
        return InvalidArgumentError("{}: 'offset' must be a non-negative integer", at);
      t.offset = image["offset"].get<int64_t>();
    }
    if (!out->empty() && t.offset < out->back().offset)
      return InvalidArgumentError(
          "{}: 'offset' {} is before the previous image's {} (list images in prompt order)", at,
          t.offset, out->back().offset);
    if (image.contains("id")) {
      if (!image["id"].is_string()) return InvalidArgumentError("{}: 'id' must be a string", at);
      auto [it, added] = contents->emplace(image["id"].get<std::string>(), *next_content);
      if (added) ++*next_content;
      t.content = it->second;
    } else {
      t.content = (*next_content)++;
    }
    out->push_back(t);
  }
  return Status::Ok();
}

}  // namespace

Expected<std::vector<TraceRequest>> ReadTrace(const std::string& path, const EncodeFn& encode,
                                              int32_t vocab_size, const TraceImageParams& ip,
                                              const TraceLoraParams& lora) {
  std::ifstream in(path);
  if (!in) return NotFoundError("{}: cannot open", path);
  std::vector<TraceRequest> out;
  std::map<std::string, uint64_t> contents;  // content id -> k
  uint64_t next_content = 1;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = ParseJsonBounded(line);
    if (j.is_discarded() || !j.is_object())
      return InvalidArgumentError("{}:{}: not a JSON object", path, line_no);
    TraceRequest r;
    if (j.contains("arrival")) {
      if (!j["arrival"].is_number() || j["arrival"].get<double>() < 0)
        return InvalidArgumentError("{}:{}: 'arrival' must be a non-negative number", path,
                                    line_no);
      r.arrival = j["arrival"].get<double>();
    }
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string())
        return InvalidArgumentError("{}:{}: 'prompt' must be a string", path, line_no);
      r.prompt = encode(j["prompt"].get<std::string>());
    } else if (j.contains("prompt_len")) {
      if (!j["prompt_len"].is_number_integer() || j["prompt_len"].get<int64_t>() < 1)
        return InvalidArgumentError("{}:{}: 'prompt_len' must be a positive integer", path,
                                    line_no);
      const int64_t n = j["prompt_len"].get<int64_t>();
      r.prompt.resize(static_cast<size_t>(n));
      // Distinct per request so prompts do not share prefix-cache blocks by accident.
      for (int64_t i = 0; i < n; ++i)
        r.prompt[i] = static_cast<int32_t>((line_no * 7919 + i * 31) % std::max(vocab_size, 1));
    } else {
      return InvalidArgumentError("{}:{}: needs 'prompt' or 'prompt_len'", path, line_no);
    }
    std::vector<TraceImage> images;
    XRT_RETURN_IF_ERROR(ReadTraceImages(j, ip, fmt::format("{}:{}", path, line_no), &contents,
                                        &next_content, &images));
    if (!images.empty()) {
      if (images.back().offset > static_cast<int64_t>(r.prompt.size()))
        return InvalidArgumentError("{}:{}: image offset {} is past the {} text tokens", path,
                                    line_no, images.back().offset, r.prompt.size());
      std::vector<int32_t> text = std::move(r.prompt);
      r.prompt.clear();
      int64_t copied = 0;
      for (const TraceImage& image : images) {
        r.prompt.insert(r.prompt.end(), text.begin() + copied, text.begin() + image.offset);
        copied = image.offset;
        r.images.push_back({static_cast<int64_t>(r.prompt.size()), ip.tokens_per_image,
                            BlockHash{image.content, kTraceImageHashTag}});
        r.prompt.insert(r.prompt.end(), static_cast<size_t>(ip.tokens_per_image),
                        ip.image_token_id);
      }
      r.prompt.insert(r.prompt.end(), text.begin() + copied, text.end());
    }
    if (r.prompt.empty()) return InvalidArgumentError("{}:{}: the prompt is empty", path, line_no);
    if (!j.contains("max_tokens") || !j["max_tokens"].is_number_integer() ||
        j["max_tokens"].get<int64_t>() < 1)
      return InvalidArgumentError("{}:{}: 'max_tokens' must be a positive integer", path, line_no);
    r.max_tokens = j["max_tokens"].get<int64_t>();
    if (j.contains("lora")) {
      if (!j["lora"].is_string() || j["lora"].get<std::string>().empty())
        return InvalidArgumentError("{}:{}: 'lora' must be a non-empty string (an adapter name)",
                                    path, line_no);
      r.lora = j["lora"].get<std::string>();
      if (!lora.enabled)
        return InvalidArgumentError("{}:{}: 'lora' names adapter '{}', but {}", path, line_no,
                                    r.lora, lora.why_not);
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgumentError("{}: the trace has no requests", path);
  return out;
}

namespace {

// Runs no kernels and computes no logits; with a list of the compiled lm_step
// executables, fails a step whose variant is missing as ModelRunner does.
class NoKernelExecutor : public StepExecutor {
 public:
  explicit NoKernelExecutor(const std::set<std::string>* lm_steps) : lm_steps_(lm_steps) {}
  Expected<const float*> Execute(const StepInputs& in) override {
    if (!lm_steps_->empty()) {
      const std::string name =
          xpk::abi::ExecutableName(xpk::ExecutableKind::lm_step, in.token_bucket, in.lora_mode);
      if (!lm_steps_->count(name))
        return OutOfRangeError("no lm_step executable {} ({} tokens, LoRA mode {})", name,
                               in.token_bucket, xpk::EnumNameLoraMode(in.lora_mode));
    }
    return nullptr;
  }

 private:
  const std::set<std::string>* lm_steps_;
};

}  // namespace

Expected<ReplayReport> Replay(const ReplayParams& p, const std::vector<TraceRequest>& trace) {
  NoKernelExecutor executor(&p.lm_step_executables);
  EngineCoreParams cp = p.core;
  cp.executor = &executor;
  cp.tokenizer = nullptr;
  cp.eos_token_ids.clear();
  // LoRA: one data-less adapter per distinct name (ids 1, 2, ... in order of
  // first appearance: the prefix-cache key), slots as bookkeeping only.
  std::unique_ptr<LoraManager> lora;
  std::map<std::string, std::shared_ptr<const LoraAdapter>> adapters;
  cp.lora = nullptr;
  if (p.lora.max_loras > 0) {
    lora = std::make_unique<LoraManager>(p.lora, /*allocate=*/false);
    cp.lora = lora.get();
  }
  for (size_t i = 0; i < trace.size(); ++i) {
    const std::string& name = trace[i].lora;
    if (name.empty() || adapters.count(name)) continue;
    if (!lora)
      return InvalidArgumentError(
          "trace request {}: names LoRA adapter '{}', but LoRA is not served", i + 1, name);
    auto a = std::make_shared<LoraAdapter>();
    a->name = name;
    a->id = static_cast<int64_t>(adapters.size()) + 1;
    a->rank = p.lora.spec.max_lora_rank;
    a->modules = p.lora.spec.target_modules;
    adapters[name] = std::move(a);
  }
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::Create(cp));
  const RequestProcessor processor(core->request_processor_params());

  ReplayReport report;
  size_t next = 0;
  double now = 0;
  while (next < trace.size() || core->HasUnfinished()) {
    if (!core->HasUnfinished() && next < trace.size()) now = std::max(now, trace[next].arrival);
    for (; next < trace.size() && trace[next].arrival <= now; ++next) {
      GenerationRequest g;
      g.request_id = fmt::format("trace-{}", next + 1);
      g.kind = PromptKind::kTokens;
      g.prompt_token_ids = trace[next].prompt;
      g.max_tokens = trace[next].max_tokens;
      g.ignore_eos = true;
      g.sampling.temperature = 0;
      g.sampling_set.temperature = true;
      Expected<EngineRequest> request = processor.Process(g);
      if (request.ok()) {
        for (const MultimodalSpan& span : trace[next].images)
          request->images.push_back({span, /*pixel_values=*/nullptr});
        if (!trace[next].lora.empty()) request->lora = adapters.at(trace[next].lora);
      }
      Status s = request.ok() ? core->AddRequest(std::move(*request)) : request.status();
      if (!s.ok()) return s.WithContext(fmt::format("trace request {}", next + 1));
    }
    EngineCoreOutputs out = core->Step();
    now += p.step_seconds;
    const StepStats& st = out.stats;
    if (st.step == 0) {
      if (!st.error.ok()) return st.error;
      if (core->HasUnfinished())
        return InternalError("replay: requests are left but nothing could be scheduled");
      continue;
    }
    ++report.steps;
    report.preemptions += st.preemptions;
    const std::string failure = !st.error.ok() ? st.error.message() : st.unbucketed;
    if (!failure.empty()) {
      ++report.steps_without_bucket;
      report.unbucketed.push_back(fmt::format("step {} ({} tokens, {} requests): {}", report.steps,
                                              st.num_tokens, st.num_reqs, failure));
    }
    if (st.ran) report.lora_mode_steps[xpk::EnumNameLoraMode(st.lora_mode)]++;
    report.lora_loads += st.lora_loads;
    report.lora_swaps += st.lora_swaps;
    if (!st.lm_step.empty()) {
      report.bucket_hits[st.lm_step]++;
      report.padding[st.lm_step] += st.lm_step_padding;
    }
    if (!st.lm_logits.empty()) {
      report.bucket_hits[st.lm_logits]++;
      report.padding[st.lm_logits] += st.lm_logits_padding;
    }
    if (!st.vision_encode.empty()) {
      report.bucket_hits[st.vision_encode]++;
      report.padding[st.vision_encode] += st.vision_encode_padding;
    }
    report.images_encoded += st.images_encoded;
    report.encoder_cache_hits += st.encoder_cache_hits;
    report.encoder_cache_misses += st.encoder_cache_misses;
    report.encoder_cache_evictions += st.encoder_cache_evictions;
    report.step_tokens.push_back(st.num_tokens);
    report.step_reqs.push_back(st.num_sampling);
    report.step_images.push_back(st.images_encoded);
    report.step_lora_adapters.push_back(st.lora_adapters);
  }
  return report;
}

}  // namespace xrt
