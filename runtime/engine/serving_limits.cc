#include "runtime/engine/serving_limits.h"

namespace xrt {
namespace {

// The limits a server may lower (the KV geometry is fixed by the artifact).
struct Field {
  const char* name;
  const char* flag;
  int64_t ServingLimits::* member;
};
constexpr Field kFields[] = {
    {"max_num_seqs", "--max-num-seqs", &ServingLimits::max_num_seqs},
    {"max_num_batched_tokens", "--max-num-batched-tokens", &ServingLimits::max_num_batched_tokens},
    {"max_model_len", "--max-model-len", &ServingLimits::max_model_len},
};

// What a `requested` value of `f` beyond the compiled one would need.
std::string Beyond(const Field& f, const ServingLimits& compiled, int64_t requested) {
  const int64_t c = compiled.*f.member;
  if (f.member == &ServingLimits::max_num_seqs) {
    const std::string range =
        c + 1 == requested ? std::to_string(requested) : fmt::format("{}..{}", c + 1, requested);
    return fmt::format(
        "the {} request rows the artifact was compiled for (lm_step's "
        "block_tables/seq_lens): steps with {} requests have no executable",
        c, range);
  }
  if (f.member == &ServingLimits::max_num_batched_tokens)
    return fmt::format(
        "the {} the artifact was compiled for (its token buckets cover steps of up "
        "to {} tokens)",
        c, c);
  return fmt::format(
      "the compiled {} ({} KV blocks per request): longer sequences have no "
      "executable",
      c, compiled.max_blocks_per_req);
}

}  // namespace

std::vector<LimitExcess> LimitsBeyondCompiled(const ServingLimits& compiled,
                                              const ServingLimits& requested) {
  std::vector<LimitExcess> out;
  for (const Field& f : kFields) {
    const int64_t want = requested.*f.member, have = compiled.*f.member;
    if (want <= have) continue;
    out.push_back({f.name, want, have,
                   fmt::format("{} {} exceeds {}; recompile with {} {}", f.name, want,
                               Beyond(f, compiled, want), f.flag, want)});
  }
  return out;
}

Expected<ServingLimits> ResolveServingLimits(const ServingLimits& compiled,
                                             const ServingLimits& requested) {
  ServingLimits out = compiled;
  for (const Field& f : kFields) {
    const int64_t want = requested.*f.member;
    if (want < 0)
      return InvalidArgumentError("{} is {}; must be >= 1 (0: the compiled value)", f.name, want);
    if (want > 0) out.*f.member = want;
  }
  std::vector<LimitExcess> excess = LimitsBeyondCompiled(compiled, requested);
  if (!excess.empty()) return InvalidArgumentError("{}", excess.front().message);
  return out;
}

}  // namespace xrt
