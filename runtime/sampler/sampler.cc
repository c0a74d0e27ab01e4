#include "runtime/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace xrt {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float Clean(float v) { return std::isnan(v) ? kNegInf : v; }

}  // namespace

Expected<SamplingState> SamplingState::Create(const SamplingParams& params, int32_t vocab_size) {
  XRT_RETURN_IF_ERROR(ValidateSamplingParams(params));
  if (vocab_size <= 0) return InvalidArgumentError("vocab_size must be > 0, got {}", vocab_size);
  // top_k larger than the vocabulary keeps everything (as vLLM clamps it).
  uint64_t seed = params.seed;
  if (!params.has_seed) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return SamplingState(params, vocab_size, seed);
}

Status SamplingState::SetPromptTokens(const int32_t* tokens, size_t count) {
  prompt_tokens_.clear();
  for (size_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size_)
      return InvalidArgumentError(
          "prompt token {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
          vocab_size_);
    prompt_tokens_.insert(tokens[i]);
  }
  return Status::Ok();
}

Status SamplingState::AddOutputToken(int32_t token) {
  if (token < 0 || token >= vocab_size_)
    return InvalidArgumentError("output token {} is outside the vocabulary [0, {})", token,
                                vocab_size_);
  ++output_counts_[token];
  ++num_output_;
  return Status::Ok();
}

int32_t SamplingState::OutputCount(int32_t token) const {
  auto it = output_counts_.find(token);
  return it == output_counts_.end() ? 0 : it->second;
}

double SamplingState::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::ApplyPenalties(const float* logits, const SamplingState& st) {
  const SamplingParams& p = st.params_;
  work_.assign(logits, logits + st.vocab_size_);
  if (p.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t tok) {
      float& v = work_[static_cast<size_t>(tok)];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    };
    for (int32_t tok : st.prompt_tokens_) penalize(tok);
    for (const auto& kv : st.output_counts_)
      if (!st.prompt_tokens_.count(kv.first)) penalize(kv.first);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& kv : st.output_counts_) {
      work_[static_cast<size_t>(kv.first)] -= p.frequency_penalty * static_cast<float>(kv.second) +
                                              (kv.second > 0 ? p.presence_penalty : 0.0f);
    }
  }
}

Expected<SampleResult> Sampler::Sample(const float* logits, SamplingState* st) {
  const SamplingParams& p = st->params_;
  const int32_t vocab = st->vocab_size_;
  const bool has_history = !st->output_counts_.empty() || !st->prompt_tokens_.empty();
  const bool penalize =
      (p.repetition_penalty != 1.0f && has_history) ||
      ((p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) && !st->output_counts_.empty());
  const float* x = logits;
  if (penalize) {
    ApplyPenalties(logits, *st);
    x = work_.data();
  }

  // Max (lowest id on ties); NaN never compares greater.
  float max_logit = kNegInf;
  int32_t argmax = -1;
  for (int32_t i = 0; i < vocab; ++i) {
    if (x[i] > max_logit) {
      max_logit = x[i];
      argmax = i;
    }
  }
  if (argmax < 0 || !std::isfinite(max_logit))
    return InvalidArgumentError(
        "cannot sample: the logits have no finite maximum (all -inf/NaN, or +inf)");

  SampleResult r;
  if (p.greedy()) {
    r.token = argmax;
    if (p.logprobs >= 0)
      FullLogprobs(p.logprobs_mode == LogprobsMode::kRaw ? logits : x, vocab, r.token, p.logprobs,
                   &r);
  } else {
    const float inv_t = 1.0f / p.temperature;
    // min_p: p_i >= min_p * p_max  <=>  x_i >= max + T * log(min_p).
    const double threshold = p.min_p > 0
                                 ? static_cast<double>(max_logit) +
                                       static_cast<double>(p.temperature) * std::log(p.min_p)
                                 : -std::numeric_limits<double>::infinity();
    auto weight = [&](float v) { return std::exp((v - max_logit) * inv_t); };
    kept_.clear();
    for (int32_t i = 0; i < vocab; ++i) {
      if (x[i] > kNegInf && static_cast<double>(x[i]) >= threshold)
        kept_.push_back({x[i], 0.0f, i});
    }
    auto better = [](const Candidate& a, const Candidate& b) {
      return a.x > b.x || (a.x == b.x && a.id < b.id);
    };
    bool reordered = false;
    if (p.top_k > 0 && kept_.size() > static_cast<size_t>(p.top_k)) {
      std::nth_element(kept_.begin(), kept_.begin() + (p.top_k - 1), kept_.end(), better);
      kept_.resize(static_cast<size_t>(p.top_k));
      reordered = true;
    }
    for (auto& c : kept_) c.w = weight(c.x);
    if (p.top_p < 1.0f && kept_.size() > 1) {
      // Keep, in (logit desc, id asc) order, every token whose mass strictly
      // above it is < top_p of the total. Found by a weighted quickselect:
      // expected O(n), no sort.
      double total = 0;
      for (const auto& c : kept_) total += c.w;
      const double target = static_cast<double>(p.top_p) * total;
      size_t lo = 0, hi = kept_.size();
      double above = 0;  // mass of kept_[0, lo), all better than kept_[lo, hi)
      while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        std::nth_element(kept_.begin() + static_cast<long>(lo),
                         kept_.begin() + static_cast<long>(mid),
                         kept_.begin() + static_cast<long>(hi), better);
        double left = 0;
        for (size_t k = lo; k < mid; ++k) left += kept_[k].w;
        if (above + left < target) {  // kept_[mid] is in the nucleus, and all before it
          above += left + kept_[mid].w;
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      kept_.resize(std::max<size_t>(lo, 1));
      reordered = true;
    }
    if (reordered) {
      // Back to ascending ids: sort a small set, else scan the vocabulary.
      const size_t k = kept_.size();
      if (k < 64 || k * 16 < static_cast<size_t>(vocab)) {
        std::sort(kept_.begin(), kept_.end(),
                  [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
      } else {
        mark_.assign(static_cast<size_t>(vocab), 0);
        for (const auto& c : kept_) mark_[static_cast<size_t>(c.id)] = 1;
        kept_.clear();
        for (int32_t t = 0; t < vocab; ++t)
          if (mark_[static_cast<size_t>(t)]) kept_.push_back({x[t], weight(x[t]), t});
      }
    }
    double sum = 0;
    for (const auto& c : kept_) sum += c.w;
    const double u = st->NextUniform() * sum;
    double cum = 0;
    r.token = kept_.back().id;
    for (const auto& c : kept_) {
      cum += c.w;
      if (u < cum) {
        r.token = c.id;
        break;
      }
    }
    if (p.logprobs >= 0) {
      if (p.logprobs_mode == LogprobsMode::kRaw) {
        FullLogprobs(logits, vocab, r.token, p.logprobs, &r);
      } else {
        KeptLogprobs(vocab, inv_t, max_logit, sum, r.token, p.logprobs, &r);
      }
    }
  }
  ++st->output_counts_[r.token];
  ++st->num_output_;
  return r;
}

void Sampler::FullLogprobs(const float* v, int32_t vocab, int32_t token, int32_t top_n,
                           SampleResult* out) {
  float m = kNegInf;
  for (int32_t i = 0; i < vocab; ++i) m = std::max(m, Clean(v[i]));
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    float c = Clean(v[i]);
    if (c > kNegInf) sum += std::exp(static_cast<double>(c) - m);
  }
  const double log_z = static_cast<double>(m) + std::log(sum);
  const float tv = Clean(v[token]);
  out->logprob = static_cast<float>(tv - log_z);
  int32_t higher = 0;
  for (int32_t i = 0; i < vocab; ++i) higher += Clean(v[i]) > tv;
  out->rank = higher + 1;
  out->top_logprobs.clear();
  if (top_n <= 0) return;
  // Min-heap of the best top_n by (value desc, id asc).
  auto better = [&](int32_t a, int32_t b) {
    float va = Clean(v[a]), vb = Clean(v[b]);
    return va > vb || (va == vb && a < b);
  };
  std::vector<int32_t> heap;
  const size_t n = static_cast<size_t>(std::min(top_n, vocab));
  heap.reserve(n + 1);
  for (int32_t i = 0; i < vocab; ++i) {
    if (heap.size() < n) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(i, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = i;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (int32_t i : heap) out->top_logprobs.push_back({i, static_cast<float>(Clean(v[i]) - log_z)});
}

void Sampler::KeptLogprobs(int32_t vocab, float inv_t, float max_logit, double sum, int32_t token,
                           int32_t top_n, SampleResult* out) {
  // kept_ (ascending ids) is the sampled distribution:
  // logprob = (x - max) / T - log(sum of weights).
  const double log_z = std::log(sum);
  auto scaled = [&](const Candidate& c) { return static_cast<double>(c.x - max_logit) * inv_t; };
  auto it = std::lower_bound(kept_.begin(), kept_.end(), token,
                             [](const Candidate& c, int32_t id) { return c.id < id; });
  out->logprob = static_cast<float>(scaled(*it) - log_z);
  int32_t higher = 0;
  for (const auto& c : kept_) higher += c.x > it->x;
  out->rank = higher + 1;
  out->top_logprobs.clear();
  if (top_n <= 0) return;
  std::vector<Candidate> best(kept_);
  const size_t n = std::min(best.size(), static_cast<size_t>(top_n));
  std::partial_sort(best.begin(), best.begin() + static_cast<long>(n), best.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return a.x > b.x || (a.x == b.x && a.id < b.id);
                    });
  for (size_t k = 0; k < n; ++k)
    out->top_logprobs.push_back({best[k].id, static_cast<float>(scaled(best[k]) - log_z)});
  if (static_cast<size_t>(top_n) > n) {
    // Tokens removed by truncation: -inf, lowest ids first.
    mark_.assign(static_cast<size_t>(vocab), 0);
    for (const auto& c : kept_) mark_[static_cast<size_t>(c.id)] = 1;
    for (int32_t t = 0; t < vocab && out->top_logprobs.size() < static_cast<size_t>(top_n); ++t)
      if (!mark_[static_cast<size_t>(t)]) out->top_logprobs.push_back({t, kNegInf});
  }
}

}  // namespace xrt
