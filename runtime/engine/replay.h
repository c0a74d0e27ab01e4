// Replay: run a request trace through the engine core (engine_core.h: the
// same Scheduler, KV cache manager, InputBuilder and stop checks the server
// runs) with a step executor that runs no kernels, and report which compiled
// executables the steps would use (`xcc check --trace`, `xcc tune-buckets`).
//
// Requests arrive in trace order; a request is added once the virtual clock
// reaches its arrival time (through the RequestProcessor, as the server adds
// them), and every step advances the clock by `step_seconds`. Without logits
// the core samples a fixed token and models no EOS: each request generates
// exactly max_tokens tokens, so the schedule depends only on lengths, arrival
// order and prefix-cache hits of the prompts.
//
// Images (a LLaVA-style artifact): a trace request may carry images; each is a
// run of tokens_per_image image-token ids in the prompt with a content hash
// (requests naming the same content id share it: encoder-cache and prefix-cache
// hits), and no pixels (the executor encodes nothing). The scheduler and the
// encoder cache treat them exactly as the server's images.
//
// LoRA (an artifact compiled with --enable-lora): a trace request may name an
// adapter. Every distinct name gets an adapter of its own with no data; a
// LoraManager that only keeps the slot bookkeeping assigns them to the
// artifact's slots, so the scheduler admits at most max_loras adapters per step
// and each step runs the lm_step variant (none / single / mixed) the server
// would run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/engine_core.h"
#include "runtime/lora/lora_manager.h"

namespace xrt {

struct TraceRequest {
  double arrival = 0;           // seconds from the start of the trace
  std::vector<int32_t> prompt;  // token ids, image placeholder runs included
  int64_t max_tokens = 1;
  // The images' placeholder spans in `prompt`, in prompt order; content_hash
  // {k, kTraceImageHashTag} for the k-th distinct content (1-based, in order of
  // first appearance in the trace).
  std::vector<MultimodalSpan> images;
  std::string lora;  // the adapter's name; "": the base model
};

// The "hi" half of every trace image's content hash.
inline constexpr uint64_t kTraceImageHashTag = 0x7472616365696d67ULL;  // "traceimg"

// What a trace's images need to know of the artifact (VisionParams); the
// defaults mean a text-only model, for which a request with images is an error.
struct TraceImageParams {
  int32_t image_token_id = -1;
  int64_t tokens_per_image = 0;
};

// What a trace's adapters need to know: whether the artifact is served with
// LoRA, and if not, why (the error of a line that names an adapter).
struct TraceLoraParams {
  bool enabled = false;
  std::string why_not = "the artifact was compiled without LoRA (xcc compile --enable-lora)";
};

// Parses JSONL: one object per line with
//   "arrival"     seconds, default 0;
//   "prompt"      text, encoded with `encode`, or "prompt_len": that many
//                 synthetic text ids (distinct per line);
//   "max_tokens"  a positive integer;
// and optionally the request's images, either
//   "images": [{"id": "cat", "tokens": 576, "offset": 3}, ...]  or
//   "num_images": 2 (with an optional "image_tokens": 576),
// where each image's placeholder run (tokens_per_image ids of the image token)
// is inserted before the text token at "offset" (0..number of text tokens;
// default 0: the start of the prompt); images are listed in prompt order
// (non-decreasing offsets; equal offsets go in list order). "tokens" /
// "image_tokens", when given, must equal the artifact's tokens_per_image. Images
// with the same "id" anywhere in the trace have the same content (an
// encoder-cache hit when still cached); an image without "id" (and every one
// of "num_images") is distinct from every other; and optionally
//   "lora": "name"  the LoRA adapter the request runs with (a non-empty string;
//                   lines naming the same adapter share it);
// an error without `lora.enabled`. Errors name the line and field.
using EncodeFn = std::function<std::vector<int32_t>(const std::string&)>;
Expected<std::vector<TraceRequest>> ReadTrace(const std::string& path, const EncodeFn& encode,
                                              int32_t vocab_size,
                                              const TraceImageParams& images = {},
                                              const TraceLoraParams& lora = {});

struct ReplayParams {
  // The engine to replay: limits, buckets, KV pool, prefix caching. Its
  // executor, tokenizer and EOS ids are not used (no kernels, no text, no EOS).
  EngineCoreParams core;
  double step_seconds = 0.05;
  // LoRA: the artifact's adapter geometry, max_loras slots as served
  // (max_loras 0: no LoRA; a request naming an adapter is then an error).
  // core.lora is ignored: the replay keeps its own bookkeeping-only manager.
  LoraGeometry lora;
  // The compiled lm_step executables (xpk::abi::ExecutableName, LoRA variants
  // included). Non-empty: a step whose lm_step is not among them fails as on
  // the server (ModelRunner::Execute), and is reported in `unbucketed`. Empty:
  // any bucket of core.buckets runs (xcc tune-buckets' hypothetical buckets).
  std::set<std::string> lm_step_executables;
};

struct ReplayReport {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t steps_without_bucket = 0;
  std::vector<std::string> unbucketed;         // one message per step that could not run
  std::map<std::string, int64_t> bucket_hits;  // "lm_step_t16", "lm_step_t16_mixed" -> steps
  std::map<std::string, int64_t> padding;      // executable -> padded minus real rows
  std::vector<int64_t> step_tokens;            // real tokens of every step, in order
  std::vector<int64_t> step_reqs;              // sampling requests of every step
  // Images: encoded (bucket_hits / padding count the vision_encode runs, in
  // images), per step, and the encoder cache's hits, misses and evictions.
  int64_t images_encoded = 0;
  std::vector<int64_t> step_images;
  int64_t encoder_cache_hits = 0;
  int64_t encoder_cache_misses = 0;
  int64_t encoder_cache_evictions = 0;
  // LoRA: steps that ran, by lm_step variant ("none", "single", "mixed"; only
  // modes that occurred), and adapters copied into a slot (swaps: of which
  // replaced another adapter).
  std::map<std::string, int64_t> lora_mode_steps;
  std::vector<int64_t> step_lora_adapters;  // distinct adapters of every step
  int64_t lora_loads = 0;
  int64_t lora_swaps = 0;
};

Expected<ReplayReport> Replay(const ReplayParams& params, const std::vector<TraceRequest>& trace);

}  // namespace xrt
