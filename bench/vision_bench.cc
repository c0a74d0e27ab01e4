// vision_bench: the vision tower of a LLaVA-style artifact, per vision_encode
// bucket, and the time to first token of a one-image request.
//
//   vision_bench ARTIFACT [--threads N] [--warmup W] [--iters K]
//                [--pixels FILE] [--prompt-ids FILE] [--ttft-iters K] [--json FILE]
//                [--profile]
//
// Per num_images bucket n: ModelRunner::EncodeImages of n images (the tower,
// the projector and the copy into the encoder cache), W untimed runs then K
// timed; images/s = n / median time. FLOPs are counted twice: from the model's
// shapes (patch embedding, q/k/v/o and fc1/fc2 of every compiled layer, the
// projector; attention's QK^T and PV separately), and from the compiled
// command list (2*M*N*K of every matmul command, 4*T*S*H*D of every attention
// command), which must agree. The time per command kind comes from re-running
// every matmul and attention command's shape alone on the same kernels
// (random data, same pool): "dispatch" (layer norms, activations, residual adds,
// embeddings: the generated code) is the rest of the measured time.
//
// TTFT: a request of --prompt-ids (a JSON array of token ids holding exactly
// one image's placeholder run; default: 10 text ids, the placeholders, 10 text
// ids) with one image and max_tokens 1 through an EngineCore (prefix caching
// off, a new image content hash each run so the encoder cache never hits):
// AddRequest -> the output carrying the first token.
//
// --profile: each bucket also runs K more encodes with the executor's
// per-command profile (Executor::set_profile) and reports where their time went
// per command label ("dispatch layer_norm", "matmul bf16 1024x1024 (bf16
// compute)", "attention", ...; "host" is the rest: the pixel copy, the encoder
// cache write).
//
// --pixels: f32 [num][C][S][S] (e.g. what HF's processor made); images are
// reused cyclically to fill a bucket. Default: deterministic values in [-2, 2].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_json.h"
#include "bench/command_profile_json.h"
#include "runtime/engine/engine_core.h"
#include "runtime/executor/model_runner.h"
#include "runtime/kernels/cpu_isa.h"
#include "runtime/kernels/dense_attention.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/weight_format.h"
#include "runtime/loader/artifact.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// FLOPs of one image through the tower and projector, from the model's shapes.
struct ShapeFlops {
  double patch = 0, attn_proj = 0, mlp = 0, projector = 0, attention = 0;
  double matmuls() const { return patch + attn_proj + mlp + projector; }
};

ShapeFlops CountShapeFlops(const xpk::VisionConfig& v, int64_t text_hidden) {
  const double p = static_cast<double>(v.image_size() / v.patch_size());
  const double patches = p * p;
  const double seq = patches + (v.tower()->str() == "clip" ? 1 : 0);  // class row
  const double d = static_cast<double>(v.hidden_size());
  const double f = static_cast<double>(v.intermediate_size());
  const double layers = static_cast<double>(v.num_layers());
  const double in_patch = static_cast<double>(v.num_channels() * v.patch_size() * v.patch_size());
  const double rows = static_cast<double>(v.tokens_per_image());
  const double proj_in = d * static_cast<double>(v.feature_layers()->size());
  const double h = static_cast<double>(text_hidden);
  ShapeFlops s;
  s.patch = 2 * patches * in_patch * d;
  s.attn_proj = layers * 4 * 2 * seq * d * d;
  s.mlp = layers * 2 * 2 * seq * d * f;
  s.projector = 2 * rows * proj_in * h + 2 * rows * h * h;
  s.attention = layers * 2 * 2 * seq * seq * d;  // QK^T and PV
  return s;
}

// The command list of one vision_encode executable, with the kernels' time per
// command kind measured by running each matmul / attention shape alone.
struct CommandProfile {
  int64_t dispatches = 0, matmuls = 0, attentions = 0;
  double matmul_flops = 0, attention_flops = 0;
  double matmul_s = 0, attention_s = 0;  // per run of the executable
  json matmul_shapes = json::array(), attention_shapes = json::array();
};

CommandProfile ProfileCommands(const xrt::Artifact& art, const xpk::Executable& e,
                               xrt::ThreadPool& pool, int reps) {
  using MP = xpk::abi::MatmulParam;
  using MB = xpk::abi::MatmulBinding;
  using AP = xpk::abi::AttentionParam;
  CommandProfile prof;
  // (m, n, k, compute, weight format) -> count and one weight of it: each matmul
  // shape re-run as its command runs, in its compute type on that weight's packed
  // bytes in the artifact (the bias left out).
  struct MatmulShape {
    int64_t count = 0;
    uint32_t weight = 0;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t, uint8_t, uint8_t>, MatmulShape> matmul_shapes;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, uint8_t>, int64_t> attention_count;
  for (const xpk::Command* c : *e.commands()) {
    if (c->kind() == xpk::CommandKind::dispatch) {
      ++prof.dispatches;
    } else if (c->ukernel() == xpk::Ukernel::matmul) {
      xpk::abi::UkernelView<xpk::Ukernel::matmul> v(*c);
      ++prof.matmuls;
      const uint32_t wi = c->bindings()->Get(v.Slot(MB::kW))->index();
      xrt::WeightFormat format = xrt::WeightFormat::kF32;
      auto w = art.weight(wi);
      if (w.ok()) xrt::WeightFormatOf((*w)->dtype(), &format);
      MatmulShape& sh =
          matmul_shapes[{v[MP::kM], v[MP::kN], v[MP::kK], static_cast<uint8_t>(c->compute()),
                         static_cast<uint8_t>(format)}];
      if (sh.count++ == 0) sh.weight = wi;
      prof.matmul_flops += 2.0 * v[MP::kM] * v[MP::kN] * v[MP::kK];
    } else if (c->ukernel() == xpk::Ukernel::attention) {
      xpk::abi::UkernelView<xpk::Ukernel::attention> v(*c);
      ++prof.attentions;
      ++attention_count[{v[AP::kNumTokens], v[AP::kSeqLen], v[AP::kNumHeads], v[AP::kHeadDim],
                         static_cast<uint8_t>(c->compute())}];
      prof.attention_flops +=
          4.0 * v[AP::kNumTokens] * v[AP::kSeqLen] * v[AP::kNumHeads] * v[AP::kHeadDim];
    }
  }
  for (const auto& [shape, sh] : matmul_shapes) {
    const auto [m, n, k, compute, format] = shape;
    const int64_t count = sh.count;
    auto bytes = art.weight_data(sh.weight);
    if (!bytes.ok()) continue;  // the loader checked every binding
    std::vector<float> a = RandomFloats(m * k, 1, -1, 1), c(m * n);
    xrt::MatmulArgs args;
    args.a = a.data();
    args.lda = k;
    args.packed_w = bytes->data;
    args.w_format = static_cast<xrt::WeightFormat>(format);
    args.c = c.data();
    args.ldc = n;
    args.m = m;
    args.n = n;
    args.k = k;
    args.compute = static_cast<xrt::ComputeType>(compute);
    xrt::Matmul(args, &pool);  // warm
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      xrt::Matmul(args, &pool);
      t.push_back(Seconds(t0, Clock::now()));
    }
    const double s = Median(t);
    prof.matmul_s += s * count;
    prof.matmul_shapes.push_back({{"m", m},
                                  {"n", n},
                                  {"k", k},
                                  {"compute", xrt::ComputeTypeName(args.compute)},
                                  {"weight_format", xrt::WeightFormatName(args.w_format)},
                                  {"count", count},
                                  {"median_ms", s * 1e3},
                                  {"gflops", 2.0 * m * n * k / s / 1e9}});
  }
  for (const auto& [shape, count] : attention_count) {
    xrt::DenseAttentionArgs a;
    uint8_t compute;
    std::tie(a.num_tokens, a.seq_len, a.num_heads, a.head_dim, compute) = shape;
    a.compute = static_cast<xrt::ComputeType>(compute);
    a.q_stride = a.k_stride = a.v_stride = a.out_stride = a.num_heads * a.head_dim;
    a.scale = 0.125f;
    const size_t n = static_cast<size_t>(a.num_tokens * a.q_stride);
    std::vector<float> q = RandomFloats(n, 3, -1, 1), k = RandomFloats(n, 4, -1, 1),
                       v = RandomFloats(n, 5, -1, 1), out(n);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = out.data();
    (void)xrt::DenseAttention(a, &pool);  // warm
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      (void)xrt::DenseAttention(a, &pool);
      t.push_back(Seconds(t0, Clock::now()));
    }
    const double s = Median(t);
    prof.attention_s += s * count;
    prof.attention_shapes.push_back(
        {{"num_tokens", a.num_tokens},
         {"seq_len", a.seq_len},
         {"heads", a.num_heads},
         {"head_dim", a.head_dim},
         {"compute", xrt::ComputeTypeName(a.compute)},
         {"count", count},
         {"median_ms", s * 1e3},
         {"gflops", 4.0 * a.num_tokens * a.seq_len * a.num_heads * a.head_dim / s / 1e9}});
  }
  return prof;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s ARTIFACT [--threads N] [--warmup W] [--iters K] [--pixels FILE] "
                 "[--prompt-ids FILE] [--ttft-iters K] [--json FILE] [--profile]\n",
                 argv[0]);
    return 2;
  }
  xrt::ModelRunnerParams rp;
  rp.artifact_path = argv[1];
  int64_t warmup = 2, iters = 5, ttft_iters = 3;
  std::string json_path, pixels_path, prompt_path;
  bool profile = false;
  for (int i = 2; i < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--profile") {
      profile = true;
      --i;  // a flag: no value
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--threads")
      rp.num_threads = std::atoi(argv[i + 1]);
    else if (a == "--warmup")
      warmup = std::atoll(argv[i + 1]);
    else if (a == "--iters")
      iters = std::max<int64_t>(1, std::atoll(argv[i + 1]));
    else if (a == "--ttft-iters")
      ttft_iters = std::max<int64_t>(1, std::atoll(argv[i + 1]));
    else if (a == "--pixels")
      pixels_path = argv[i + 1];
    else if (a == "--prompt-ids")
      prompt_path = argv[i + 1];
    else if (a == "--json")
      json_path = argv[i + 1];
    else {
      std::fprintf(stderr, "error: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto runner = xrt::ModelRunner::Create(rp);
  if (!runner.ok()) {
    std::fprintf(stderr, "error: %s\n", runner.status().message().c_str());
    return 1;
  }
  xrt::ModelRunner& r = **runner;
  const xpk::ModelConfig& cfg = *r.artifact().manifest().config();
  const xpk::VisionConfig* vis = cfg.vision();
  if (!vis) {
    std::fprintf(stderr, "error: %s has no vision tower\n", argv[1]);
    return 1;
  }
  const int64_t pixel_floats = vis->num_channels() * vis->image_size() * vis->image_size();
  const int64_t tpi = vis->tokens_per_image();

  std::vector<float> pixels;
  if (!pixels_path.empty()) {
    std::string bytes;
    if (!ReadFile(pixels_path, &bytes) || bytes.size() % (pixel_floats * sizeof(float)) != 0 ||
        bytes.empty()) {
      std::fprintf(stderr, "error: %s: not a whole number of [%lld] f32 images\n",
                   pixels_path.c_str(), static_cast<long long>(pixel_floats));
      return 1;
    }
    pixels.resize(bytes.size() / sizeof(float));
    std::memcpy(pixels.data(), bytes.data(), bytes.size());
  } else {
    pixels = RandomFloats(4 * pixel_floats, 42, -2, 2);
  }
  const int64_t num_pixel_images = static_cast<int64_t>(pixels.size()) / pixel_floats;

  json out;
  out["artifact"] = rp.artifact_path;
  out["threads"] = r.pool().num_threads();
  out["isa"] = xrt::BestKernelsName();
  out["warmup"] = warmup;
  out["iters"] = iters;
  const ShapeFlops sf = CountShapeFlops(*vis, cfg.hidden_size());
  out["tower"] = {{"tower", vis->tower()->str()},
                  {"hidden_size", vis->hidden_size()},
                  {"intermediate_size", vis->intermediate_size()},
                  {"layers_run", vis->num_layers()},
                  {"heads", vis->num_attention_heads()},
                  {"image_size", vis->image_size()},
                  {"patch_size", vis->patch_size()},
                  {"tokens_per_image", tpi},
                  {"text_hidden_size", cfg.hidden_size()}};
  out["gflop_per_image"] = {{"patch_embedding", sf.patch / 1e9},
                            {"qkvo", sf.attn_proj / 1e9},
                            {"mlp", sf.mlp / 1e9},
                            {"projector", sf.projector / 1e9},
                            {"matmuls", sf.matmuls() / 1e9},
                            {"attention", sf.attention / 1e9}};

  // vision_encode per bucket.
  std::map<int64_t, const xpk::Executable*> exe_by_bucket;
  for (const xpk::Executable* e : *r.artifact().manifest().executables())
    if (e->kind() == xpk::ExecutableKind::vision_encode) exe_by_bucket[e->num_images()] = e;
  for (int64_t n : r.image_buckets()) {
    std::vector<const float*> images;
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < n; ++i) {
      images.push_back(pixels.data() + (i % num_pixel_images) * pixel_floats);
      rows.push_back(i * tpi);
    }
    std::vector<double> times;
    for (int64_t it = 0; it < warmup + iters; ++it) {
      auto t0 = Clock::now();
      xrt::Status s = r.EncodeImages(images, rows);
      const double sec = Seconds(t0, Clock::now());
      if (!s.ok()) {
        std::fprintf(stderr, "error: vision_encode of %lld images: %s\n", static_cast<long long>(n),
                     s.ToString().c_str());
        return 1;
      }
      if (it >= warmup) times.push_back(sec);
    }
    const double med = Median(times);
    const double best = *std::min_element(times.begin(), times.end());
    json b = {{"num_images", n},
              {"median_ms", med * 1e3},
              {"min_ms", best * 1e3},
              {"images_per_s", n / med},
              {"matmul_gflops", n * sf.matmuls() / med / 1e9},
              {"all_gflops", n * (sf.matmuls() + sf.attention) / med / 1e9}};
    CommandProfile prof = ProfileCommands(r.artifact(), *exe_by_bucket.at(n), r.pool(), 3);
    const double dispatch_s = std::max(0.0, med - prof.matmul_s - prof.attention_s);
    b["compiled_commands"] = {{"dispatches", prof.dispatches},
                              {"matmuls", prof.matmuls},
                              {"attentions", prof.attentions},
                              {"matmul_gflop", prof.matmul_flops / 1e9},
                              {"attention_gflop", prof.attention_flops / 1e9}};
    b["time_by_kind_ms"] = {
        {"matmul", prof.matmul_s * 1e3},
        {"attention", prof.attention_s * 1e3},
        {"dispatch_and_copy", dispatch_s * 1e3},
        {"matmul_kernel_gflops", prof.matmul_flops / prof.matmul_s / 1e9},
        {"attention_kernel_gflops", prof.attention_flops / prof.attention_s / 1e9}};
    if (profile) {
      xrt::CommandProfile cp;
      std::vector<double> ptimes;
      r.executor().set_profile(&cp);
      for (int64_t it = 0; it < iters; ++it) {
        auto t0 = Clock::now();
        xrt::Status s = r.EncodeImages(images, rows);
        ptimes.push_back(Seconds(t0, Clock::now()));
        if (!s.ok()) break;  // it ran above
      }
      r.executor().set_profile(nullptr);
      b["profile"] = xcc::bench::ProfileJson(cp, ptimes);
    }
    b["matmul_shapes"] = prof.matmul_shapes;
    b["attention_shapes"] = prof.attention_shapes;
    out["vision_encode"].push_back(b);
  }

  // TTFT of a one-image request through the engine core.
  std::vector<int32_t> prompt;
  if (!prompt_path.empty()) {
    std::string text;
    if (!ReadFile(prompt_path, &text)) {
      std::fprintf(stderr, "error: cannot read %s\n", prompt_path.c_str());
      return 1;
    }
    prompt = json::parse(text).get<std::vector<int32_t>>();
  } else {
    const int32_t text_vocab = std::min<int32_t>(static_cast<int32_t>(r.vocab_size()),
                                                 static_cast<int32_t>(vis->image_token_id()));
    for (int i = 0; i < 10; ++i) prompt.push_back((i * 7919 + 13) % text_vocab);
    prompt.insert(prompt.end(), tpi, vis->image_token_id());
    for (int i = 10; i < 20; ++i) prompt.push_back((i * 7919 + 13) % text_vocab);
  }
  const int64_t offset =
      std::find(prompt.begin(), prompt.end(), vis->image_token_id()) - prompt.begin();
  if (std::count(prompt.begin(), prompt.end(), vis->image_token_id()) != tpi) {
    std::fprintf(stderr, "error: the prompt must hold exactly %lld image tokens (one image)\n",
                 static_cast<long long>(tpi));
    return 1;
  }
  xrt::EngineCoreParams cp = r.engine_core_params();
  cp.enable_prefix_caching = false;
  auto core = xrt::EngineCore::Create(cp);
  if (!core.ok()) {
    std::fprintf(stderr, "error: %s\n", core.status().ToString().c_str());
    return 1;
  }
  auto image = std::make_shared<std::vector<float>>(pixels.begin(), pixels.begin() + pixel_floats);
  std::vector<double> ttft;
  int64_t steps = 0;
  for (int64_t it = 0; it < 1 + ttft_iters; ++it) {  // the first run is a warm-up
    xrt::EngineRequest req;
    req.request_id = "ttft" + std::to_string(it);
    req.prompt = prompt;
    req.max_tokens = 1;
    req.ignore_eos = true;
    req.sampling.temperature = 0.0f;
    xrt::ImageInput in;
    in.span.offset = offset;
    in.span.length = tpi;
    in.span.content_hash = xrt::BlockHash{0x5eed0000ULL + static_cast<uint64_t>(it), 7};
    in.pixel_values = image;
    req.images.push_back(std::move(in));
    auto t0 = Clock::now();
    if (xrt::Status s = (*core)->AddRequest(std::move(req)); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
      return 1;
    }
    double first = -1;
    int64_t n_steps = 0;
    while ((*core)->HasUnfinished()) {
      xrt::EngineCoreOutputs o = (*core)->Step();
      ++n_steps;
      if (!o.stats.error.ok()) {
        std::fprintf(stderr, "error: %s\n", o.stats.error.ToString().c_str());
        return 1;
      }
      for (const xrt::RequestOutput& ro : o.outputs)
        if (first < 0 && !ro.tokens.empty()) first = Seconds(t0, Clock::now());
    }
    if (it > 0) ttft.push_back(first);
    steps = n_steps;
  }
  out["ttft_one_image"] = {{"prompt_tokens", prompt.size()},
                           {"text_tokens", static_cast<int64_t>(prompt.size()) - tpi},
                           {"engine_steps", steps},
                           {"median_ms", Median(ttft) * 1e3},
                           {"min_ms", *std::min_element(ttft.begin(), ttft.end()) * 1e3},
                           {"runs", ttft.size()}};

  if (!xcc::bench::EmitJson(out, json_path)) return 1;
  return 0;
}
