// xrt: the serving runtime. Loads a compiled .xpk artifact; never compiles.
//   xrt run ARTIFACT [--host H] [--port P] [--max-num-seqs N] [--max-num-batched-tokens N]
//           [--kv-cache-memory BYTES | --num-kv-blocks N] [--kv-cache-dtype auto|f32|f16|fp8]
//           [--served-model-name NAME] [--api-key
//           KEY]
//           [--shutdown-timeout SECONDS] [--allowed-local-media-path DIR]
//           [--limit-mm-per-prompt N] [--media-fetch-timeout SECONDS]
//           [--max-image-bytes BYTES] [--media-max-redirects N]
//           [--lora-modules NAME=PATH ...] [--allow-runtime-lora-updating]
//           [--max-loras N] [--max-lora-rank R] [--server-dev-mode]
//   xrt generate ARTIFACT --prompt TEXT [--image FILE]... [--chat] [--max-tokens N]
//                [--lora NAME=PATH | NAME]
//                [--temperature T] [--top-p P] [--top-k K] [--repetition-penalty R] [--seed S]
//                [--threads N] [--show-ids] [--dry-run]
//   both: [--verify-weights] (recompute the weights' checksums before running)
//         [--mmap] (map the artifact in place instead of reading it onto huge pages)
//
// Both are clients of the one engine core (runtime/engine/engine_core.h):
// `run` through the serving engine's thread (LLMEngine), `generate` as one
// request driven to completion; requests are made by the RequestProcessor.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "runtime/engine/artifact_params.h"
#include "runtime/engine/engine_core.h"
#include "runtime/engine/llm_engine.h"
#include "runtime/engine/request_processor.h"
#include "runtime/executor/model_runner.h"
#include "runtime/kernels/cpu_isa.h"
#include "runtime/lora/lora_manager.h"
#include "runtime/lora/peft_adapter.h"
#include "runtime/server/http_server.h"
#include "runtime/server/media_fetcher.h"

namespace {

int Fail(const xrt::Status& s) {
  std::fprintf(stderr, "xrt: error: %s\n", s.message().c_str());
  return 1;
}

// The request path of this model for an engine core with `core` params
// (limits, KV pool, tokenizer): adds the chat template, the model's
// generation_config defaults and its vision params (kept in *vision, which
// must outlive the processor; nullopt for a text-only model).
xrt::Expected<xrt::RequestProcessor> MakeProcessor(const xrt::ModelRunner& runner,
                                                   xrt::RequestProcessorParams core,
                                                   std::optional<xrt::VisionParams>* vision) {
  XRT_ASSIGN_OR_RETURN(*vision, xrt::VisionParamsOf(runner.artifact()));
  core.chat_template = runner.chat_template();
  core.sampling_defaults = runner.sampling_defaults();
  core.vision = vision->has_value() ? &**vision : nullptr;
  return xrt::RequestProcessor(std::move(core));
}

// xrt generate's request: a raw prompt (the image token text marks where each
// --image goes) or, with --chat, a user turn (and a system one). A vision
// model's template gets the content as a list of parts, the images before the
// text as in llava-hf's examples; a text model's gets strings.
xrt::Expected<xrt::GenerationRequest> GenerateRequest(const std::string& prompt, bool chat,
                                                      const std::string& system,
                                                      const std::vector<std::string>& images,
                                                      bool vision) {
  xrt::GenerationRequest g;
  g.request_id = "generate";
  for (const std::string& path : images) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return xrt::InvalidArgumentError("--image {}: cannot open the file", path);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return xrt::InvalidArgumentError("--image {}: cannot read the file", path);
    g.images.push_back(xrt::RequestImage{"--image " + path, std::move(bytes)});
  }
  if (!chat) {
    g.prompt = prompt;
    return g;
  }
  g.kind = xrt::PromptKind::kChat;
  using Json = nlohmann::ordered_json;
  auto content = [&](const std::string& text, size_t num_images) -> Json {
    if (!vision) return text;
    Json parts = Json::array();
    for (size_t i = 0; i < num_images; ++i) parts.push_back({{"type", "image"}});
    parts.push_back({{"type", "text"}, {"text", text}});
    return parts;
  };
  if (!system.empty()) g.messages.push_back({{"role", "system"}, {"content", content(system, 0)}});
  g.messages.push_back({{"role", "user"}, {"content", content(prompt, images.size())}});
  return g;
}

// --show-ids / --dry-run: the prompt ids and where the images sit.
nlohmann::json PromptJson(const xrt::EngineRequest& r) {
  nlohmann::json images = nlohmann::json::array();
  for (const xrt::ImageInput& image : r.images)
    images.push_back({{"offset", image.span.offset},
                      {"length", image.span.length},
                      {"content_hash", fmt::format("{:016x}{:016x}", image.span.content_hash.hi,
                                                   image.span.content_hash.lo)}});
  return {{"prompt_ids", r.prompt}, {"images", std::move(images)}};
}

// --verify-weights: recomputes the checksum of every segment but the code (which the
// loader verified at open); the first mismatch, or a segment without a checksum, is an error.
xrt::Status VerifyWeights(const xrt::Artifact& a) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < a.num_segments(); ++i) {
    const xpk::Segment* s = a.manifest().segments()->Get(i);
    if (s->kind() == xpk::SegmentKind::code) continue;
    XRT_RETURN_IF_ERROR(a.VerifySegment(i));
    bytes += s->size();
  }
  std::fprintf(stderr, "xrt: verified the checksums of %.1f MiB of weights in %.2f s\n",
               bytes / 1048576.0,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return xrt::Status::Ok();
}

// Loads the artifact (the loader verifies the code segment) and, with
// --verify-weights, the weights' checksums too.
xrt::Expected<std::unique_ptr<xrt::ModelRunner>> LoadRunner(const xrt::ModelRunnerParams& rp,
                                                            bool verify_weights) {
  const auto start = std::chrono::steady_clock::now();
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<xrt::ModelRunner> runner, xrt::ModelRunner::Create(rp));
  const xrt::Artifact& a = runner->artifact();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (a.is_copy()) {
    std::fprintf(stderr,
                 "xrt: loaded %.1f MiB in %.2f s, read into memory (%.1f MiB of it on transparent "
                 "huge pages; --mmap maps the file in place)\n",
                 a.file_bytes().size / 1048576.0, seconds, a.HugePageBytes() / 1048576.0);
  } else {
    std::fprintf(stderr, "xrt: loaded %.1f MiB in %.2f s, mapped in place (--mmap)\n",
                 a.file_bytes().size / 1048576.0, seconds);
  }
  if (verify_weights) XRT_RETURN_IF_ERROR(VerifyWeights(runner->artifact()));
  return runner;
}

// Registers the PEFT adapters of `args` ("name=path", vLLM's --lora-modules form)
// in the artifact's LoRA registry. Every adapter is tried and every failure is
// reported (each lists all of its problems); any failure is an error, before
// anything is served. `base_name` (the served model name) cannot name an adapter.
xrt::Status LoadLoraModules(xrt::ModelRunner& runner, const std::vector<std::string>& args,
                            const std::string& base_name, const char* flag) {
  if (args.empty()) return xrt::Status::Ok();
  xrt::LoraRegistry* registry = runner.lora_registry();
  if (!registry)
    return xrt::InvalidArgumentError(
        "{}: {} was compiled without LoRA; compile it with `xcc compile --enable-lora` (and "
        "--max-loras N --max-lora-rank R) to serve adapters",
        flag, runner.artifact().path());
  auto modules = xrt::ParseLoraModules(args);
  if (!modules.ok()) return modules.status().WithContext(flag);
  std::vector<std::string> errors;
  for (const auto& [name, path] : *modules) {
    if (name == base_name) {
      errors.push_back(
          fmt::format("'{}' is the served model name; choose another adapter name", name));
      continue;
    }
    auto loaded = registry->Load(name, path);
    if (!loaded.ok()) {
      errors.push_back(loaded.status().message());
      continue;
    }
    std::fprintf(stderr, "xrt: loaded LoRA adapter '%s' from '%s' (rank %lld)\n", name.c_str(),
                 path.c_str(), static_cast<long long>((*loaded)->rank));
  }
  if (errors.empty()) return xrt::Status::Ok();
  std::string message =
      fmt::format("{}: {} of {} adapters failed to load:", flag, errors.size(), modules->size());
  for (const std::string& e : errors) message += "\n  " + e;
  return xrt::InvalidArgumentError("{}", message);
}

// "2GiB", "512MiB", "1000000" -> bytes; errors name `flag`.
xrt::Expected<int64_t> ParseBytes(const std::string& text, const char* flag = "--kv-cache-memory") {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return xrt::InvalidArgumentError("{}: '{}' is not a size", flag, text);
  }
  std::string unit = text.substr(pos);
  double mul = 1;
  if (unit == "" || unit == "B")
    mul = 1;
  else if (unit == "K" || unit == "KiB")
    mul = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "KB")
    mul = 1e3;
  else if (unit == "MB")
    mul = 1e6;
  else if (unit == "GB")
    mul = 1e9;
  else
    return xrt::InvalidArgumentError("{}: unknown unit '{}'", flag, unit);
  if (!(v > 0)) return xrt::InvalidArgumentError("{}: must be positive", flag);
  return static_cast<int64_t>(v * mul);
}

// Serves until SIGINT/SIGTERM, then shuts down gracefully, as uvicorn under
// vLLM does: stop accepting connections and requests, let the requests in
// flight finish for up to `shutdownTimeout` seconds (a second signal ends the
// wait), end the rest with finish_reason "abort" (streams get a final chunk
// and [DONE]), exit 0.
int Serve(xrt::ModelRunnerParams rp, xrt::EngineCoreParams ep, xrt::server::ServerParams sp,
          const std::string& kv_memory, double shutdown_timeout, bool verify_weights,
          const std::vector<std::string>& lora_modules, int64_t max_lora_rank) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below

  if (!kv_memory.empty()) {
    auto bytes = ParseBytes(kv_memory);
    if (!bytes.ok()) return Fail(bytes.status());
    rp.kv_cache_bytes = *bytes;
  }
  auto runner = LoadRunner(rp, verify_weights);
  if (!runner.ok()) return Fail(runner.status());
  xrt::ModelRunner& r = **runner;
  xrt::EngineCoreParams cp = r.engine_core_params();
  cp.requested = ep.requested;
  cp.enable_prefix_caching = ep.enable_prefix_caching;
  cp.check_recompilation = ep.check_recompilation;
  cp.max_loras = ep.max_loras;
  if (max_lora_rank > 0) {
    if (!r.lora_registry())
      return Fail(xrt::InvalidArgumentError(
          "--max-lora-rank: {} was compiled without LoRA (xcc compile --enable-lora)",
          rp.artifact_path));
    if (xrt::Status s = r.lora_registry()->LimitRank(max_lora_rank); !s.ok())
      return Fail(s.WithContext("--max-lora-rank"));
  }
  if (sp.served_model_name.empty()) {
    std::string name = rp.artifact_path.substr(rp.artifact_path.find_last_of('/') + 1);
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".xpk") == 0)
      name.resize(name.size() - 4);
    sp.served_model_name = name;
  }
  if (xrt::Status s = LoadLoraModules(r, lora_modules, sp.served_model_name, "--lora-modules");
      !s.ok())
    return Fail(s);
  sp.lora_registry = r.lora_registry();
  auto engine = xrt::LLMEngine::Create(cp);
  if (!engine.ok()) return Fail(engine.status());
  const xrt::ServingLimits& lim = (*engine)->limits();
  std::optional<xrt::VisionParams> vision;
  auto made = MakeProcessor(r, (*engine)->request_processor_params(), &vision);
  if (!made.ok()) return Fail(made.status());
  const xrt::RequestProcessor& processor = *made;
  if (sp.http_threads <= 0)
    sp.http_threads = static_cast<int>(std::max<int64_t>(64, 4 * lim.max_num_seqs));
  xrt::server::HttpServer server(sp, engine->get(), &processor);
  xrt::Status s = server.Start();
  if (!s.ok()) return Fail(s);
  std::fprintf(
      stderr,
      "xrt: serving '%s' on http://%s:%d/v1 (max_num_seqs %lld, max_num_batched_tokens %lld, "
      "max_model_len %lld, %lld KV blocks of %lld tokens, %s KV cache, %s kernels)\n",
      sp.served_model_name.c_str(), sp.host.c_str(), server.port(),
      static_cast<long long>(lim.max_num_seqs), static_cast<long long>(lim.max_num_batched_tokens),
      static_cast<long long>(lim.max_model_len), static_cast<long long>(r.num_kv_blocks()),
      static_cast<long long>(lim.block_size), xrt::KvCacheDtypeName(r.kv_cache_dtype()),
      xrt::BestKernelsName());
  int sig = 0;
  sigwait(&signals, &sig);
  server.StopAccepting();
  std::fprintf(
      stderr,
      "xrt: %s received, shutting down: no longer accepting requests; waiting up to %g s for %lld "
      "in flight\n",
      sig == SIGINT ? "SIGINT" : "SIGTERM", shutdown_timeout,
      static_cast<long long>(server.num_in_flight()));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(shutdown_timeout));
  while (server.num_in_flight() > 0 && Clock::now() < deadline) {
    timespec tick = {0, 20 * 1000 * 1000};
    if (sigtimedwait(&signals, nullptr, &tick) > 0) {
      std::fprintf(stderr, "xrt: second signal: not waiting any longer\n");
      break;
    }
  }
  if (const int64_t left = server.num_in_flight(); left > 0)
    std::fprintf(stderr, "xrt: aborting %lld requests still in flight\n",
                 static_cast<long long>(left));
  (*engine)->Shutdown();  // every request left gets its final output, finish_reason "abort"
  server.Wait();
  engine->reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xrt: serving runtime for xcc artifacts"};
  app.require_subcommand(1);

  xrt::ModelRunnerParams rp;
  std::string prompt, system;
  bool chat = false, ignoreEos = false, show_ids = false, verify_weights = false, dry_run = false;
  bool map_in_place = false;
  const char* mmap_help =
      "Map the artifact in place (as llama.cpp does by default) instead of reading it into "
      "memory on transparent huge pages: a faster start, and its pages are shared with other "
      "processes through the page cache, but a decode step that reads the weights from DRAM is "
      "slower (bench/README.md)";
  std::vector<std::string> images;
  const char* verify_weights_help =
      "Recompute the checksum of every weights segment before running (reads the whole "
      "artifact); fail on a mismatch. The code is always verified";
  const char* kv_dtype_help =
      "KV cache element type: f32 (keys and values as computed), f16 (rounded to half, as "
      "llama.cpp's default cache: half the memory, so twice the tokens for --kv-cache-memory, "
      "and half the bytes decode attention reads; outputs deviate slightly, see the README), fp8 "
      "(alias fp8_e4m3: one byte per value, OCP e4m3 without scales, as vLLM's fp8 cache: half "
      "of f16's memory and bytes again, at 3 mantissa bits; outputs deviate more, see the "
      "README), or auto: f16 for an artifact compiled with --compute bf16 or int8, f32 otherwise";
  int64_t maxTokens = 128;
  xrt::SamplingParams sp;
  sp.temperature = 0.0f;
  int64_t seed = -1;
  auto* gen = app.add_subcommand("generate", "Run one prompt offline and print the reply");
  gen->add_option("artifact", rp.artifact_path, "The .xpk artifact")->required();
  gen->add_option("-p,--prompt", prompt, "Prompt text")->required();
  gen->add_flag("--chat", chat, "Apply the model's chat template to the prompt (as a user turn)");
  gen->add_option("--system", system, "System message for --chat");
  gen->add_option("-n,--max-tokens", maxTokens, "Most tokens to generate")->capture_default_str();
  auto* temp_opt = gen->add_option("--temperature", sp.temperature,
                                   "0: greedy (default: the model's generation_config, else 0)");
  auto* top_p_opt =
      gen->add_option("--top-p", sp.top_p, "Nucleus sampling mass (default: the model's, else 1)");
  auto* top_k_opt = gen->add_option(
      "--top-k", sp.top_k, "Keep the k most likely tokens (default: the model's, else all)");
  auto* rep_pen_opt = gen->add_option("--repetition-penalty", sp.repetition_penalty,
                                      "Penalty for tokens of the prompt and output (default: the "
                                      "model's, else 1)");
  gen->add_option("--min-p", sp.min_p, "Drop tokens below min_p x the top probability");
  gen->add_option("--seed", seed, "Sampling seed");
  gen->add_option("--threads", rp.num_threads, "Worker threads (default: all cores)");
  gen->add_option("--num-kv-blocks", rp.num_kv_blocks, "KV cache blocks (default: from limits)");
  std::string gen_kv_dtype = "auto";
  gen->add_option("--kv-cache-dtype", gen_kv_dtype, kv_dtype_help)->capture_default_str();
  gen->add_flag("--ignore-eos", ignoreEos, "Keep generating past end-of-sequence tokens");
  gen->add_option("--image", images,
                  "An image file (PNG, JPEG, WebP), repeatable: in a raw prompt the model's image "
                  "token (e.g. <image>) marks where each goes, in order; with --chat they go in "
                  "the user turn, before the text");
  gen->add_flag("--show-ids", show_ids,
                "Also print prompt and output token ids and the images' placeholder spans (JSON, "
                "stderr)");
  gen->add_flag("--dry-run", dry_run,
                "Only make the request (tokenize, place the images) and print its prompt ids and "
                "image spans (JSON, stdout); generate nothing");
  gen->add_flag("--verify-weights", verify_weights, verify_weights_help);
  gen->add_flag("--mmap", map_in_place, mmap_help);
  std::string lora;
  gen->add_option("--lora", lora,
                  "Run with a LoRA adapter: NAME=PATH (a PEFT directory) or the NAME of an "
                  "adapter packed into the artifact (xcc compile --lora-modules)");

  xrt::ModelRunnerParams run_rp;
  xrt::EngineCoreParams run_ep;
  xrt::server::ServerParams run_sp;
  std::string kv_memory;
  bool no_prefix_caching = false;
  double shutdown_timeout = 0;
  auto* run = app.add_subcommand("run", "Serve the artifact over an OpenAI-compatible HTTP API");
  run->add_option("artifact", run_rp.artifact_path, "The .xpk artifact")->required();
  run->add_option("--host", run_sp.host, "Address to listen on")->capture_default_str();
  run->add_option("--port", run_sp.port, "Port (0: any free port)")->capture_default_str();
  run->add_option("--max-num-seqs", run_ep.requested.max_num_seqs,
                  "Most requests per step (default and maximum: the compiled limit)");
  run->add_option("--max-num-batched-tokens", run_ep.requested.max_num_batched_tokens,
                  "Token budget per step (default and maximum: the compiled limit)");
  run->add_option("--kv-cache-memory", kv_memory, "KV cache size, e.g. 2GiB");
  run->add_option("--num-kv-blocks", run_rp.num_kv_blocks, "KV cache size in blocks");
  std::string run_kv_dtype = "auto";
  run->add_option("--kv-cache-dtype", run_kv_dtype, kv_dtype_help)->capture_default_str();
  run->add_option("--served-model-name", run_sp.served_model_name,
                  "Model name in the API (default: the artifact's file name)");
  run->add_option("--api-key", run_sp.api_key, "Require 'Authorization: Bearer KEY' on /v1");
  run->add_option("--threads", run_rp.num_threads, "Worker threads (default: all cores)");
  run_sp.http_threads = 0;
  run->add_option("--http-threads", run_sp.http_threads,
                  "HTTP worker threads; each open keep-alive connection holds one "
                  "(default: max(64, 4 x max_num_seqs))");
  run->add_flag("--no-enable-prefix-caching", no_prefix_caching, "Disable prefix caching");
  run->add_option(
         "--shutdown-timeout", shutdown_timeout,
         "On SIGTERM/SIGINT, stop accepting requests and let those in flight finish for up to "
         "this many seconds (a second signal ends the wait), then end the rest with "
         "finish_reason 'abort'. Default 0, as in vLLM: end them at once")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  run->add_flag("--verify-weights", verify_weights, verify_weights_help);
  run->add_flag("--mmap", map_in_place, mmap_help);
  // Image content parts (runtime/server/media_fetcher.h), as vLLM's flags.
  std::string image_limit, max_image_bytes;
  run->add_option("--allowed-local-media-path", run_sp.media.allowed_local_media_path,
                  "Accept file:// image URLs for files below this directory (default: refused)");
  run->add_option("--limit-mm-per-prompt", image_limit,
                  "Most images in one request: N, image=N or {\"image\": N} (default: 8)");
  run->add_option("--media-fetch-timeout", run_sp.media.timeout_seconds,
                  "Seconds to fetch one http(s) image URL, redirects included")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--max-image-bytes", max_image_bytes,
                  "Largest image accepted as fetched (or decoded from base64), e.g. 20MiB "
                  "(default: 20MiB)");
  run->add_option("--media-max-redirects", run_sp.media.max_redirects,
                  "Most redirects followed when fetching an image URL")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  std::vector<std::string> lora_modules;
  run->add_option("--lora-modules", lora_modules,
                  "LoRA adapters to serve, NAME=PATH (a PEFT directory) ...; a request selects "
                  "one with \"model\": \"NAME\". Needs an artifact compiled with --enable-lora");
  int64_t max_lora_rank = 0;
  run->add_option("--max-loras", run_ep.max_loras,
                  "Most distinct adapters in one batch (default: the artifact's adapter slots; "
                  "never more)");
  run->add_option("--max-lora-rank", max_lora_rank,
                  "Serve adapters up to this rank only (default: the artifact's max_lora_rank; "
                  "never more)");
  run->add_flag("--allow-runtime-lora-updating", run_sp.allow_runtime_lora_updating,
                "Enable POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's "
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING)");
  run->add_flag("--server-dev-mode", run_sp.server_dev_mode,
                "Enable POST /pause[?mode=abort|keep], POST /resume and GET /is_paused (vLLM's "
                "VLLM_SERVER_DEV_MODE): freeze or abort generation, e.g. around weight updates "
                "or to make requests meet in one step in tests");
  run->add_flag("--check-recompilation", run_ep.check_recompilation,
                "Strict mode: a step no compiled bucket holds fails its requests (counted in "
                "/metrics, logged) instead of being split. Neither mode ever compiles");

  CLI11_PARSE(app, argc, argv);
  if (*run) {
    run_ep.enable_prefix_caching = !no_prefix_caching;
    if (!image_limit.empty()) {
      auto limit = xrt::server::ParseImageLimit(image_limit);
      if (!limit.ok()) return Fail(limit.status());
      run_sp.media.limit_images_per_prompt = *limit;
    }
    if (!max_image_bytes.empty()) {
      auto bytes = ParseBytes(max_image_bytes, "--max-image-bytes");
      if (!bytes.ok()) return Fail(bytes.status());
      run_sp.media.max_image_bytes = *bytes;
    }
    // Bad media flags fail before the model is loaded (HttpServer::Start checks them again).
    if (auto media = xrt::server::MediaFetcher::Create(run_sp.media); !media.ok())
      return Fail(media.status());
    auto kv_dtype = xrt::ParseKvCacheDtype(run_kv_dtype);
    if (!kv_dtype.ok()) return Fail(kv_dtype.status());
    run_rp.kv_cache_dtype = *kv_dtype;
    if (map_in_place) run_rp.load = xrt::ArtifactLoad::kMap;
    return Serve(run_rp, run_ep, run_sp, kv_memory, shutdown_timeout, verify_weights, lora_modules,
                 max_lora_rank);
  }

  auto kv_dtype = xrt::ParseKvCacheDtype(gen_kv_dtype);
  if (!kv_dtype.ok()) return Fail(kv_dtype.status());
  rp.kv_cache_dtype = *kv_dtype;
  if (map_in_place) rp.load = xrt::ArtifactLoad::kMap;
  auto runner = LoadRunner(rp, verify_weights);
  if (!runner.ok()) return Fail(runner.status());
  xrt::ModelRunner& r = **runner;
  auto core = xrt::EngineCore::Create(r.engine_core_params());
  if (!core.ok()) return Fail(core.status());
  std::optional<xrt::VisionParams> vision;
  auto made = MakeProcessor(r, (*core)->request_processor_params(), &vision);
  if (!made.ok()) return Fail(made.status());
  const xrt::RequestProcessor& processor = *made;

  auto generation = GenerateRequest(prompt, chat, system, images, vision.has_value());
  if (!generation.ok()) return Fail(generation.status());
  xrt::GenerationRequest& g = *generation;
  if (!lora.empty()) {
    // NAME=PATH loads a PEFT directory; a bare NAME selects an adapter packed
    // into the artifact.
    std::string name = lora.substr(0, lora.find('='));
    if (lora.find('=') != std::string::npos)
      if (xrt::Status s = LoadLoraModules(r, {lora}, "", "--lora"); !s.ok()) return Fail(s);
    if (!r.lora_registry())
      return Fail(xrt::InvalidArgumentError(
          "--lora: {} was compiled without LoRA (xcc compile --enable-lora)", rp.artifact_path));
    g.lora = r.lora_registry()->Find(name);
    if (!g.lora) {
      std::string known;
      for (const auto& a : r.lora_registry()->List())
        known += (known.empty() ? "" : ", ") + a->name;
      return Fail(xrt::InvalidArgumentError(
          "--lora: the artifact has no adapter '{}' ({}); give NAME=PATH to load a PEFT "
          "directory",
          name, known.empty() ? "it packs none" : "it packs " + known));
    }
  }
  g.max_tokens = maxTokens;
  g.ignore_eos = ignoreEos;
  if (seed >= 0) {
    sp.has_seed = true;
    sp.seed = static_cast<uint64_t>(seed);
  }
  g.sampling = sp;
  // Flags not given take the model's generation_config defaults (as vLLM).
  g.sampling_set.temperature = temp_opt->count() > 0;
  g.sampling_set.top_p = top_p_opt->count() > 0;
  g.sampling_set.top_k = top_k_opt->count() > 0;
  g.sampling_set.repetition_penalty = rep_pen_opt->count() > 0;
  auto request = processor.Process(g);
  if (!request.ok()) return Fail(request.status());
  if (dry_run) {
    std::printf("%s\n", PromptJson(*request).dump().c_str());
    return 0;
  }
  const nlohmann::json prompt_json = PromptJson(*request);
  const std::vector<int32_t> ids = request->prompt;
  const int64_t prompt_tokens = static_cast<int64_t>(ids.size());
  if (xrt::Status s = (*core)->AddRequest(std::move(*request)); !s.ok()) return Fail(s);

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto t1 = t0;
  int64_t prefill_steps = 0;
  std::vector<int32_t> outputIds;
  std::string finishReason, error;
  xrt::Status s = xrt::RunToCompletion(**core, [&](const xrt::RequestOutput& o) {
    if (outputIds.empty() && !o.tokens.empty()) {
      t1 = Clock::now();
      prefill_steps = (*core)->num_steps();
    }
    for (const xrt::GeneratedToken& t : o.tokens) outputIds.push_back(t.token);
    std::fwrite(o.text.data(), 1, o.text.size(), stdout);
    std::fflush(stdout);
    if (o.finished) {
      finishReason = o.finish_reason;
      error = o.error;
    }
  });
  const auto t2 = Clock::now();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!s.ok()) return Fail(s);
  if (finishReason == "error") return Fail(xrt::InternalError("{}", error));
  const double prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  const double decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  const double prefill_tps = prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0;
  const int64_t decoded = static_cast<int64_t>(outputIds.size()) - 1;
  const double decode_tps = decode_seconds > 0 && decoded > 0 ? decoded / decode_seconds : 0;
  std::fprintf(stderr,
               "[prompt %lld tokens, prefill %.1f tok/s in %lld steps | generated %zu tokens, "
               "decode %.1f tok/s | finish: %s]\n",
               static_cast<long long>(prompt_tokens), prefill_tps,
               static_cast<long long>(prefill_steps), outputIds.size(), decode_tps,
               finishReason.c_str());
  if (show_ids) {
    nlohmann::json j = prompt_json;
    j["output_ids"] = outputIds;
    std::fprintf(stderr, "%s\n", j.dump().c_str());
  }
  return 0;
}
