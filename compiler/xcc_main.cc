// xcc: the ahead-of-time compiler driver.
//   xcc compile MODEL_PATH -o ARTIFACT [options]
//   xcc inspect ARTIFACT [--json]
//   xcc check ARTIFACT [--serving-config FILE] [--inputs MODEL_PATH ...] [--trace FILE]
//             [--verify-weights] [--json]
//     exit codes: 0 all good, 1 a finding (gap, stale, corrupt segment), 2 could not run
//   xcc tune-buckets ARTIFACT --trace FILE [--max-executables K] [--serving-config FILE]
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "compiler/check.h"
#include "compiler/compile.h"
#include "compiler/tune_buckets.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/loader/artifact.h"
#include "runtime/loader/manifest_printer.h"
#include "runtime/lora/peft_adapter.h"

namespace {

int Fail(const xrt::Status& s) {
  std::fprintf(stderr, "xcc: error: %s\n", s.message().c_str());
  return 1;
}

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xcc: ahead-of-time compiler for xrt serving artifacts"};
  app.require_subcommand(1);

  xcc::CompileOptions co;
  std::string tokenBuckets;
  auto* compile = app.add_subcommand("compile", "Compile a model into a bucketed .xpk artifact");
  compile->add_option("model", co.model_path, "HF model directory or .gguf file")->required();
  compile->add_option("-o,--output", co.output_path, "Output artifact (.xpk)")->required();
  compile->add_option("--max-num-seqs", co.limits.max_num_seqs, "Most requests in one step")
      ->capture_default_str();
  compile
      ->add_option("--max-num-batched-tokens", co.limits.max_num_batched_tokens,
                   "Token budget of one step")
      ->capture_default_str();
  compile->add_option("--max-model-len", co.limits.max_model_len,
                      "Longest prompt + output (default: min(max_position_embeddings, 4096))");
  compile->add_option("--block-size", co.limits.block_size, "KV cache block size in tokens")
      ->capture_default_str();
  compile->add_option("--token-buckets", tokenBuckets,
                      "Explicit num_tokens buckets, e.g. 16,32,64 (default: doubling from 16 "
                      "to cover --max-num-batched-tokens)");
  compile->add_option("--token-bucket-gap", co.token_bucket_gap,
                      "Double buckets up to G, then grow by G");
  std::string imageBuckets;
  compile->add_option("--image-buckets", imageBuckets,
                      "Explicit vision_encode num_images buckets, e.g. 1,2,4 (default: doubling "
                      "from 1 up to the images one step's encoder budget holds)");
  compile
      ->add_option("--encoder-cache-size", co.encoder_cache_rows,
                   "Encoder-output cache in rows (image tokens); 0: automatic")
      ->capture_default_str();
  compile
      ->add_option("--limit-mm-per-prompt", co.max_images_per_prompt,
                   "Most images one request may carry")
      ->capture_default_str();
  std::vector<std::string> loraModules;
  compile->add_flag("--enable-lora", co.enable_lora,
                    "Also compile the LoRA variants of lm_step (one adapter in the batch, and "
                    "mixed adapters per token)");
  compile
      ->add_option("--max-loras", co.max_loras,
                   "Adapter slots: most distinct adapters in one batch")
      ->capture_default_str();
  compile->add_option("--max-lora-rank", co.max_lora_rank, "Largest adapter rank served")
      ->capture_default_str();
  compile
      ->add_option("--lora-target-modules", co.lora_target_modules,
                   "Modules with LoRA slots (default: q_proj k_proj v_proj o_proj gate_proj "
                   "up_proj down_proj)")
      ->delimiter(',');
  compile->add_option("--lora-modules", loraModules,
                      "PEFT adapters packed into the artifact, as name=path (repeatable)");
  compile
      ->add_option(
          "--weight-dtype", co.weight_dtype,
          "How linear weights and embedding tables are stored: auto (each tensor's "
          "own format: GGUF q8_0/q4_0/q4_1/q5_0/q5_1/q3_k/q4_k/q5_k/q6_k/iq4_nl/iq4_xs blocks, "
          "f16/bf16 stay "
          "16-bit; with --compute bf16, f32/f16/bf16 linear weights become bf16 pairs), "
          "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 (converted or quantized at "
          "compile time; there is no quantizer to q3_k/q4_k/q5_k/q6_k/iq4_nl/iq4_xs)")
      ->capture_default_str();
  compile
      ->add_option("--compute", co.compute,
                   "What the linear layers' matmuls multiply: f32; bf16 (activations and "
                   "weights rounded to bf16, products summed in f32: the numerics of bf16 matrix "
                   "units; on CPUs without them it is slower; the attention products too; bf16 "
                   "weights of linears are stored as pairs of k-rows for the --target's bf16 "
                   "unit, AMX or vdpbf16ps); or int8 (activations quantized "
                   "to int8 per block, integer dot products with quantized weights, as "
                   "llama.cpp: faster decode on q4/q8/K-quant weights). Deviations from f32 are "
                   "in the README")
      ->capture_default_str();
  compile->add_option("--target", co.target, "host, x86-64-v3, x86-64-v4 or an LLVM CPU name")
      ->capture_default_str();
  compile->add_option("--dump-ir-after", co.dump_ir_after,
                      "Print the IR after this pass (e.g. xcc-xg-fuse); repeatable");
  compile->add_flag("-q,--quiet", co.quiet, "No progress or summary");

  std::string inspect_path;
  bool inspect_json = false;
  auto* inspect = app.add_subcommand("inspect", "Print an artifact's manifest");
  inspect->add_option("artifact", inspect_path, "The .xpk file")->required();
  inspect->add_flag("--json", inspect_json, "Print JSON");

  xcc::CheckOptions check_options;
  bool check_json = false;
  auto* check = app.add_subcommand(
      "check",
      "CI gate: prove every step shape the serving limits allow is compiled, and that the "
      "artifact is up to date with its inputs and intact. Exit 0: all good; 1: a gap, "
      "staleness or a corrupt segment was found; 2: the check could not run");
  check->add_option("artifact", check_options.artifact_path, "The .xpk file")->required();
  check->add_option("--serving-config", check_options.serving_config_path,
                    "JSON with xrt run's limits (max-num-seqs, max-num-batched-tokens, "
                    "max-model-len); default: the artifact's");
  check->add_option("--inputs", check_options.inputs,
                    "Model directory or .gguf to re-hash against the artifact's provenance");
  check->add_option("--trace", check_options.trace_path,
                    "JSONL request trace (arrival, prompt or prompt_len, max_tokens) to replay "
                    "through the real scheduler: bucket histogram, padding, preemptions");
  check->add_flag("--verify-weights", check_options.verify_weights,
                  "Also recompute the checksum of every weights segment (reads the whole "
                  "file); a mismatch is a finding naming the segment and both digests. Code "
                  "segments are always verified");
  check->add_flag("--json", check_json, "Print JSON");

  xcc::TuneOptions tune_options;
  auto* tune = app.add_subcommand(
      "tune-buckets",
      "Propose the lm_step token buckets that minimize padding on a request trace, under a "
      "cap on executables; prints the padding of the current, default and proposed sets and "
      "the flags for xcc compile");
  tune->add_option("artifact", tune_options.artifact_path,
                   "An artifact of the model (its limits, tokenizer and KV shape are used)")
      ->required();
  tune->add_option("--trace", tune_options.trace_path, "JSONL request trace")->required();
  tune->add_option("--max-executables", tune_options.max_executables,
                   "Most lm_step executables (default: as many as the default set)");
  tune->add_option("--serving-config", tune_options.serving_config_path,
                   "JSON with xrt run's limits (default: the artifact's)");

  CLI11_PARSE(app, argc, argv);

  if (*tune) {
    auto report = xcc::TuneBuckets(tune_options);
    if (!report.ok()) return Fail(report.status());
    std::cout << report->ToText();
    return 0;
  }

  if (*check) {
    auto report = xcc::RunCheck(check_options);
    if (!report.ok()) {
      std::fprintf(stderr, "xcc check: could not run: %s\n", report.status().message().c_str());
      return 2;
    }
    if (check_json) {
      std::cout << report->ToJson().dump(2) << "\n";
    } else {
      std::cout << "xcc check " << check_options.artifact_path << "\n" << report->ToText();
    }
    return report->findings.empty() ? 0 : 1;
  }

  if (*compile) {
    if (!tokenBuckets.empty()) {
      auto parsed = xrt::ParseBucketList(tokenBuckets);
      if (!parsed.ok()) return Fail(parsed.status().WithContext("--token-buckets"));
      co.token_buckets = *parsed;
    }
    if (!imageBuckets.empty()) {
      auto parsed = xrt::ParseBucketList(imageBuckets);
      if (!parsed.ok()) return Fail(parsed.status().WithContext("--image-buckets"));
      co.image_buckets = *parsed;
    }
    if (!loraModules.empty()) {
      auto parsed = xrt::ParseLoraModules(loraModules);
      if (!parsed.ok()) return Fail(parsed.status().WithContext("--lora-modules"));
      co.lora_modules = *parsed;
    }
    auto summary = xcc::Compile(co);
    if (!summary.ok()) return Fail(summary.status());
    if (!co.quiet) {
      std::fprintf(stderr,
                   "compiled %s -> %s in %.1f s\n"
                   "  executables      %lld (%lld dispatch functions)\n"
                   "  code             %s\n"
                   "  weights          %s\n"
                   "  largest arena    %s\n"
                   "  artifact         %s\n",
                   co.model_path.c_str(), co.output_path.c_str(), summary->seconds,
                   static_cast<long long>(summary->num_executables),
                   static_cast<long long>(summary->num_dispatch_functions),
                   Bytes(summary->code_bytes).c_str(), Bytes(summary->weight_bytes).c_str(),
                   Bytes(summary->max_arena_bytes).c_str(), Bytes(summary->file_bytes).c_str());
      for (const auto& [format, use] : summary->weight_formats)
        std::fprintf(stderr, "    %-14s %lld weights, %s\n", format.c_str(),
                     static_cast<long long>(use.weights), Bytes(use.bytes).c_str());
      if (co.compute != "f32")
        std::fprintf(stderr, "  compute          %s (linear layers%s)\n", co.compute.c_str(),
                     co.compute != "bf16"             ? ""
                     : summary->image_buckets.empty() ? ", attention"
                                                      : ", attention, vision attention");
      for (const std::string& note : summary->weight_notes)
        std::fprintf(stderr, "  note: %s\n", note.c_str());
      if (!summary->image_buckets.empty())
        std::fprintf(stderr,
                     "  vision_encode    buckets %s (num_images; %lld tokens per image)\n"
                     "  encoder cache    %lld rows\n",
                     fmt::format("{}", fmt::join(summary->image_buckets, ", ")).c_str(),
                     static_cast<long long>(summary->tokens_per_image),
                     static_cast<long long>(summary->encoder_cache_rows));
    }
    return 0;
  }
  if (*inspect) {
    auto artifact = xrt::Artifact::Open(inspect_path);
    if (!artifact.ok()) return Fail(artifact.status());
    if (inspect_json) {
      std::cout << xrt::ManifestToJson(**artifact).dump(2) << "\n";
    } else {
      std::cout << xrt::ManifestToText(**artifact);
    }
    return 0;
  }
  return 0;
}
