// xrt: the serving runtime. Loads a compiled .xpk artifact; never compiles.
//   xrt generate ARTIFACT --prompt TEXT [--chat] [--max-tokens N] [--temperature T]
//                [--top-p P] [--top-k K] [--seed S] [--threads N]
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "runtime/model_runner/generate.h"
#include "runtime/model_runner/model_runner.h"
#include "runtime/tokenizer/streaming_detokenizer.h"
#include "schemas/artifact_generated.h"

namespace {

int Fail(const xrt::Status& s) {
  std::fprintf(stderr, "xrt: error: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xrt: serving runtime for xcc artifacts"};
  app.require_subcommand(1);

  xrt::ModelRunnerParams rp;
  std::string prompt, system;
  bool chat = false, ignoreEos = false, showIds = false;
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
  auto* tempOpt = gen->add_option("--temperature", sp.temperature,
                                  "0: greedy (default: the model's generation_config, else 0)");
  auto* topPOpt = gen->add_option("--top-p", sp.top_p,
                                  "Nucleus sampling mass (default: the model's, else 1)");
  auto* topKOpt = gen->add_option("--top-k", sp.top_k,
                                  "Keep the k most likely tokens (default: the model's, else all)");
  gen->add_option("--min-p", sp.min_p, "Drop tokens below min_p x the top probability");
  gen->add_option("--seed", seed, "Sampling seed");
  gen->add_option("--threads", rp.num_threads, "Worker threads (default: all cores)");
  gen->add_option("--num-kv-blocks", rp.num_kv_blocks, "KV cache blocks (default: from limits)");
  gen->add_flag("--ignore-eos", ignoreEos, "Keep generating past end-of-sequence tokens");
  gen->add_flag("--show-ids", showIds, "Also print prompt and output token ids (JSON, stderr)");

  CLI11_PARSE(app, argc, argv);

  auto runner = xrt::ModelRunner::Create(rp);
  if (!runner.ok()) return Fail(runner.status());
  xrt::ModelRunner& r = **runner;
  const xrt::Tokenizer& tok = r.tokenizer();
  // Sampling defaults from the model's generation_config.json, as vLLM does;
  // flags given on the command line win.
  const auto& cfg = *r.artifact().manifest().config();
  if (tempOpt->count() == 0 && cfg.default_temperature() >= 0)
    sp.temperature = static_cast<float>(cfg.default_temperature());
  if (topPOpt->count() == 0 && cfg.default_top_p() > 0) sp.top_p = static_cast<float>(cfg.default_top_p());
  if (topKOpt->count() == 0 && cfg.default_top_k() > 0) sp.top_k = static_cast<int32_t>(cfg.default_top_k());

  std::vector<int32_t> ids;
  if (chat) {
    const xrt::ChatTemplate* tmpl = r.chat_template();
    if (!tmpl) return Fail(xrt::FailedPreconditionError("--chat: the model has no chat template"));
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    std::string bos = tok.bos_id() >= 0 ? tok.Decode({tok.bos_id()}) : "";
    std::string eos = tok.eos_id() >= 0 ? tok.Decode({tok.eos_id()}) : "";
    auto text = xrt::ApplyChatTemplate(*tmpl, messages, true, bos, eos);
    if (!text.ok()) return Fail(text.status().WithContext("chat template"));
    // Like HF's apply_chat_template(tokenize=True): the template writes the
    // special tokens itself.
    ids = tok.Encode(*text, /*add_special_tokens=*/false);
  } else {
    ids = tok.Encode(prompt, /*add_special_tokens=*/true);
  }

  xrt::GenerateRequest req;
  req.prompt = ids;
  req.max_tokens = maxTokens;
  req.ignore_eos = ignoreEos;
  if (seed >= 0) {
    sp.has_seed = true;
    sp.seed = static_cast<uint64_t>(seed);
  }
  req.sampling = sp;
  xrt::StreamingDetokenizer detok(&tok, /*skip_special_tokens=*/true);
  req.on_token = [&](int32_t id) {
    std::string s = detok.Push(id);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  auto result = xrt::Generate(r, req);
  if (!result.ok()) return Fail(result.status());
  std::string tail = detok.Flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double prefillTps = result->prefill_seconds > 0 ? result->prompt_tokens / result->prefill_seconds : 0;
  const int64_t decoded = static_cast<int64_t>(result->tokens.size()) - 1;
  const double decodeTps = result->decode_seconds > 0 && decoded > 0 ? decoded / result->decode_seconds : 0;
  std::fprintf(stderr,
               "[prompt %lld tokens, prefill %.1f tok/s in %lld steps | generated %zu tokens, "
               "decode %.1f tok/s | finish: %s]\n",
               static_cast<long long>(result->prompt_tokens), prefillTps,
               static_cast<long long>(result->prefill_steps), result->tokens.size(), decodeTps,
               result->finish_reason.c_str());
  if (showIds) {
    nlohmann::json j = {{"prompt_ids", ids}, {"output_ids", result->tokens}};
    std::fprintf(stderr, "%s\n", j.dump().c_str());
  }
  return 0;
}
