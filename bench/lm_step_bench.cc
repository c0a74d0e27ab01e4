// lm_step_bench: prefill and decode speed of a compiled artifact, per bucket,
// next to this machine's memory bandwidth measured in the same run.
//
//   lm_step_bench ARTIFACT [--threads N] [--context L] [--decode-reqs R] [--iters K]
//                 [--json FILE] [--lora single|mixed] [--kv-cache-dtype auto|f32|f16|fp8]
//                 [--profile] [--mmap]
//
// Prefill: one request whose step fills a whole token bucket (lm_step + the
// lm_logits of its last token), tokens/s = bucket / step time.
// Decode: R requests (default 1; a server's batch at concurrency R) with L
// tokens of context each, one token per request per step (lm_step in the
// smallest bucket that holds R + lm_logits for R rows); tokens/s = R / step
// time. The bandwidth roofline fraction is (weight bytes a decode step must
// read / step time) / measured read bandwidth; the bytes are those of every
// weight the two executables bind, except the embedding table, of which a
// decode step reads one row per token. The read bandwidth is probed on small
// pages and on transparent huge pages; the fraction is against the probe on
// the weights' kind of memory: huge pages for an artifact read into memory
// (xrt's default), small ones with --mmap (the file mapped in place).
//
// --profile: the prefill and decode steps also report where their time goes, per command
// label (Executor::set_profile: "dispatch rope_q", "matmul q4_1 576x1536", "paged_attention",
// ...) in ms and calls per step, the rest being the host's share (inputs,
// logits) and the timing itself.
//
// --lora (an artifact compiled with --enable-lora): the steps run the single-
// adapter executables (every token on slot 0) or the mixed ones (the tokens cut
// into max_loras consecutive segments, one slot each: prefill chunks of several
// adapters); the slots hold zeros, which costs the kernels the same.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <nlohmann/json.hpp>

#include "bench/bench_json.h"
#include "bench/command_profile_json.h"
#include "bench/read_bandwidth.h"
#include "runtime/executor/model_runner.h"
#include "runtime/kernels/cpu_isa.h"
#include "runtime/kv_cache/kv_cache_manager.h"
#include "runtime/loader/artifact.h"
#include "schemas/artifact_generated.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

using xcc::bench::ProfileJson;

struct Runner {
  xrt::ModelRunner& r;
  xrt::KvCacheManager kv;
  xrt::StepInputs in;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s ARTIFACT [--threads N] [--context L] [--decode-reqs R] [--iters K] "
                 "[--json FILE] [--lora single|mixed] [--kv-cache-dtype auto|f32|f16|fp8] "
                 "[--profile] [--mmap]\n",
                 argv[0]);
    return 2;
  }
  xrt::ModelRunnerParams rp;
  rp.artifact_path = argv[1];
  int64_t context = 128, iters = 10, decode_reqs = 1;
  std::string json_path;
  std::string lora;  // "", "single" or "mixed"
  bool profile = false;
  std::string kv_dtype = "auto";
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--profile") {
      profile = true;
      continue;
    }
    if (a == "--mmap") {  // as xrt's --mmap: the artifact mapped in place
      rp.load = xrt::ArtifactLoad::kMap;
      continue;
    }
    if (i + 1 >= argc) break;
    const char* v = argv[++i];
    if (a == "--threads")
      rp.num_threads = std::atoi(v);
    else if (a == "--context")
      context = std::atoll(v);
    else if (a == "--decode-reqs")
      decode_reqs = std::atoll(v);
    else if (a == "--iters")
      iters = std::atoll(v);
    else if (a == "--json")
      json_path = v;
    else if (a == "--lora")
      lora = v;
    else if (a == "--kv-cache-dtype")
      kv_dtype = v;
  }
  if (auto dtype = xrt::ParseKvCacheDtype(kv_dtype); dtype.ok()) {
    rp.kv_cache_dtype = *dtype;
  } else {
    std::fprintf(stderr, "error: %s\n", dtype.status().message().c_str());
    return 1;
  }
  auto runner = xrt::ModelRunner::Create(rp);
  if (!runner.ok()) {
    std::fprintf(stderr, "error: %s\n", runner.status().message().c_str());
    return 1;
  }
  xrt::ModelRunner& r = **runner;
  if (!lora.empty() && ((lora != "single" && lora != "mixed") || !r.artifact().manifest().lora())) {
    std::fprintf(stderr, "--lora single|mixed needs an artifact compiled with --enable-lora\n");
    return 1;
  }
  const auto& m = r.artifact().manifest();

  // Weight bytes a decode step reads: matmul weights whole, an embedding table
  // that no matmul reads (untied) one row per token, everything else whole.
  std::set<uint32_t> bound, matmul;
  for (const xpk::Executable* e : *m.executables())
    for (const xpk::Command* c : *e->commands())
      for (const xpk::Binding* b : *c->bindings()) {
        if (b->kind() != xpk::BindingKind::weight) continue;
        bound.insert(b->index());
        if (c->kind() == xpk::CommandKind::ukernel && c->ukernel() == xpk::Ukernel::matmul)
          matmul.insert(b->index());
      }
  uint64_t weight_bytes = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  const int64_t vocab_rows = m.config()->vocab_size();
  for (uint32_t i : bound) {
    const xpk::Weight* w = m.weights()->Get(i);
    const bool table =
        !matmul.count(i) && w->shape()->size() == 2 && w->shape()->Get(0) == vocab_rows;
    const uint64_t bytes = table ? w->size() / vocab_rows : w->size();
    weight_bytes += bytes;
    bytes_by_dtype[xrt::DTypeName(w->dtype())] += bytes;
  }

  auto make_kv = [&]() {
    xrt::KvCacheManagerParams kp;
    kp.num_blocks = r.num_kv_blocks();
    kp.block_size = r.limits().block_size;
    kp.max_blocks_per_req = r.limits().max_blocks_per_req;
    return std::move(*xrt::KvCacheManager::Create(kp));
  };
  xrt::StepInputs in;
  r.input_builder().Reserve(&in);
  const int32_t vocab = static_cast<int32_t>(r.vocab_size());
  auto tokens = [&](int64_t n) {
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
    return t;
  };
  // Runs one step: toks[i] at request ids[i]'s current position; returns seconds
  // (-1 on an error).
  auto step = [&](xrt::KvCacheManager& kv, const std::vector<int64_t>& ids,
                  const std::vector<std::vector<int32_t>>& toks) -> double {
    std::vector<xrt::ScheduledRequest> reqs(ids.size());
    int64_t count = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t n = static_cast<int64_t>(toks[i].size());
      if (!kv.AllocateSlots(ids[i], n).ok()) return -1;
      reqs[i].token_ids = toks[i].data();
      reqs[i].num_tokens = n;
      reqs[i].num_computed_tokens = *kv.NumComputedTokens(ids[i]);
      reqs[i].block_table = *kv.BlockTable(ids[i]);
      reqs[i].needs_logits = true;
      count += n;
    }
    if (!r.input_builder().Build(reqs, &in).ok()) return -1;
    if (!lora.empty()) {
      const int64_t slots = r.artifact().manifest().lora()->max_loras();
      for (int64_t t = 0; t < count; ++t)
        in.lora_slot[t] = lora == "single" ? 0 : static_cast<int32_t>(t * slots / count);
      in.lora_mode = lora == "single" ? xpk::LoraMode::single : xpk::LoraMode::mixed;
    }
    auto t0 = Clock::now();
    auto logits = r.Execute(in);
    double s = Seconds(t0, Clock::now());
    if (!logits.ok()) return -1;
    for (size_t i = 0; i < ids.size(); ++i)
      (void)kv.CommitComputed(ids[i], static_cast<int64_t>(toks[i].size()));
    return s;
  };

  nlohmann::json out;
  out["artifact"] = rp.artifact_path;
  out["lora"] = lora.empty() ? "none" : lora;
  out["threads"] = r.pool().num_threads();
  out["kv_cache_dtype"] = xrt::KvCacheDtypeName(r.kv_cache_dtype());
  out["kernel_isa"] = xrt::BestKernelsName();
  // The roofline fraction is against the probe on memory of the weights' kind.
  const bool read_in = r.artifact().is_copy();
  out["artifact_load"] = read_in ? "read" : "mmap";
  out["artifact_huge_page_bytes"] = r.artifact().HugePageBytes();
  out["read_bandwidth_small_pages_gbs"] = xcc::bench::MeasureReadBandwidth(r.pool(), false);
  out["read_bandwidth_huge_pages_gbs"] = xcc::bench::MeasureReadBandwidth(r.pool(), true);
  out["read_bandwidth_gbs"] =
      out[read_in ? "read_bandwidth_huge_pages_gbs" : "read_bandwidth_small_pages_gbs"];
  out["decode_weight_bytes_per_step"] = weight_bytes;
  out["decode_weight_bytes_by_dtype"] = bytes_by_dtype;

  // Prefill per bucket.
  for (int64_t bucket : r.buckets().token_buckets()) {
    if (bucket > r.limits().max_model_len) continue;
    std::vector<double> times;
    xrt::CommandProfile prof;
    if (profile) r.executor().set_profile(&prof);
    for (int64_t it = 0; it < iters; ++it) {
      xrt::KvCacheManager kv = make_kv();
      auto toks = tokens(bucket);
      if (!kv.AddRequest(1, toks.data(), bucket).ok()) break;
      double s = step(kv, {1}, {toks});
      if (s < 0) break;
      times.push_back(s);
    }
    r.executor().set_profile(nullptr);
    if (times.empty()) continue;
    nlohmann::json row = {{"bucket", bucket}};
    if (profile) row["profile"] = ProfileJson(prof, times);
    std::sort(times.begin(), times.end());
    double med = times[times.size() / 2];
    row["median_ms"] = med * 1e3;
    row["tokens_per_s"] = bucket / med;
    out["prefill"].push_back(row);
  }

  // Decode: decode_reqs requests at `context` tokens of context.
  const int64_t max_reqs = std::min(r.limits().max_num_seqs, r.buckets().max_tokens());
  if (decode_reqs < 1 || decode_reqs > max_reqs) {
    std::fprintf(stderr, "--decode-reqs %lld: the artifact's steps hold 1 to %lld requests\n",
                 static_cast<long long>(decode_reqs), static_cast<long long>(max_reqs));
    return 1;
  }
  {
    xrt::KvCacheManager kv = make_kv();
    auto prompt = tokens(context);
    std::vector<int64_t> ids;
    bool ready = true;
    // Prefilled one request at a time, in chunks of the largest bucket.
    const int64_t chunk = r.buckets().max_tokens();
    for (int64_t id = 1; ready && id <= decode_reqs; ++id) {
      ready = kv.AddRequest(id, prompt.data(), context).ok();
      for (int64_t done = 0; ready && done < context;) {
        std::vector<int32_t> part(prompt.begin() + done,
                                  prompt.begin() + std::min(context, done + chunk));
        ready = step(kv, {id}, {part}) >= 0;
        done += static_cast<int64_t>(part.size());
      }
      ids.push_back(id);
    }
    if (!ready) {
      std::fprintf(stderr, "decode: cannot prefill %lld requests of %lld tokens\n",
                   static_cast<long long>(decode_reqs), static_cast<long long>(context));
      return 1;
    }
    std::vector<double> times;
    xrt::CommandProfile prof;
    if (profile) r.executor().set_profile(&prof);
    for (int64_t it = 0; it < std::max<int64_t>(iters, 20); ++it) {
      std::vector<std::vector<int32_t>> next(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        next[i] = {static_cast<int32_t>((it + 31 * static_cast<int64_t>(i)) % vocab)};
        (void)kv.AppendTokens(ids[i], next[i].data(), 1);
      }
      double s = step(kv, ids, next);
      if (s < 0) break;
      times.push_back(s);
    }
    r.executor().set_profile(nullptr);
    if (profile && !times.empty()) out["decode_profile"] = ProfileJson(prof, times);
    if (!times.empty()) {
      std::sort(times.begin(), times.end());
      double med = times[times.size() / 2];
      double gbs = weight_bytes / med / 1e9;
      out["decode"] = {{"context", context},
                       {"reqs", decode_reqs},
                       {"median_ms", med * 1e3},
                       {"tokens_per_s", decode_reqs / med},
                       {"weight_read_gbs", gbs},
                       {"roofline_fraction", gbs / out["read_bandwidth_gbs"].get<double>()}};
    }
  }
  if (!xcc::bench::EmitJson(out, json_path)) return 1;
  return 0;
}
