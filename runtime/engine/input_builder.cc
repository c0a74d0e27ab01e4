#include "runtime/engine/input_builder.h"

#include <algorithm>
#include <limits>

namespace xrt {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Expected<InputBuilder> InputBuilder::Create(InputBuilderParams params) {
  if (params.buckets.token_buckets().empty() || params.buckets.req_buckets().empty()) {
    return InvalidArgumentError("input builder: the bucket table is empty");
  }
  const struct {
    const char* name;
    int64_t value;
  } fields[] = {{"max_num_reqs", params.max_num_reqs},
                {"max_blocks_per_req", params.max_blocks_per_req},
                {"block_size", params.block_size}};
  for (const auto& f : fields) {
    if (f.value < 1) {
      return InvalidArgumentError("input builder: {} is {}; must be >= 1", f.name, f.value);
    }
  }
  if (params.vocab_size < 0) {
    return InvalidArgumentError("input builder: vocab_size is {}; must be >= 0 (0: unchecked)",
                                params.vocab_size);
  }
  if (params.max_num_reqs * params.max_blocks_per_req > kInt32Max ||
      params.buckets.max_tokens() > kInt32Max) {
    return InvalidArgumentError(
        "input builder: {} requests x {} blocks or {} tokens exceed the int32 inputs",
        params.max_num_reqs, params.max_blocks_per_req, params.buckets.max_tokens());
  }
  return InputBuilder(std::move(params));
}

Expected<InputBuilder> InputBuilder::ForCompiled(const ServingLimits& compiled, BucketTable buckets,
                                                 int64_t vocab_size) {
  InputBuilderParams p;
  p.buckets = std::move(buckets);
  p.max_num_reqs = compiled.max_num_seqs;
  p.max_blocks_per_req = compiled.max_blocks_per_req;
  p.block_size = compiled.block_size;
  p.vocab_size = vocab_size;
  return Create(std::move(p));
}

Status InputBuilder::Validate(const std::vector<ScheduledRequest>& step, int64_t* num_tokens,
                              int64_t* num_logits) const {
  const InputBuilderParams& p = params_;
  if (step.empty()) return InvalidArgumentError("step: no requests");
  if (static_cast<int64_t>(step.size()) > p.max_num_reqs) {
    return OutOfRangeError("step: {} requests exceed max_num_reqs = {}", step.size(),
                           p.max_num_reqs);
  }
  int64_t total = 0, logits = 0;
  for (size_t r = 0; r < step.size(); ++r) {
    const ScheduledRequest& q = step[r];
    if (q.num_tokens < 1 || q.token_ids == nullptr) {
      return InvalidArgumentError("step: request {} has {} new tokens{}", r, q.num_tokens,
                                  q.token_ids == nullptr ? " and no token ids" : "");
    }
    if (q.num_computed_tokens < 0) {
      return InvalidArgumentError("step: request {} has num_computed_tokens = {}", r,
                                  q.num_computed_tokens);
    }
    if (q.block_table == nullptr) {
      return InvalidArgumentError("step: request {} has no block table", r);
    }
    if (q.lora_slot < -1) {
      return InvalidArgumentError("step: request {} has lora_slot = {}; must be >= -1", r,
                                  q.lora_slot);
    }
    const int64_t seq_len = q.num_computed_tokens + q.num_tokens;
    if (seq_len > kInt32Max) {
      return OutOfRangeError("step: request {} reaches position {}, beyond int32", r, seq_len - 1);
    }
    const std::vector<int32_t>& table = *q.block_table;
    const int64_t table_len = static_cast<int64_t>(table.size());
    if (table_len > p.max_blocks_per_req) {
      return OutOfRangeError(
          "step: request {} has a block table of {} blocks; max_blocks_per_req = {}", r, table_len,
          p.max_blocks_per_req);
    }
    const int64_t needed = CeilDiv(seq_len, p.block_size);
    if (table_len < needed) {
      return OutOfRangeError(
          "step: request {} has a block table of {} blocks; its {} positions need {} (block_size "
          "{})",
          r, table_len, seq_len, needed, p.block_size);
    }
    for (int64_t b = 0; b < table_len; ++b) {
      const int32_t block = table[static_cast<size_t>(b)];
      if (block < 0) {
        return InvalidArgumentError("step: request {}: block table entry {} is {}", r, b, block);
      }
      if (b < needed && (static_cast<int64_t>(block) + 1) * p.block_size - 1 > kInt32Max) {
        return OutOfRangeError("step: request {}: block {} (entry {}) has slots beyond int32", r,
                               block, b);
      }
    }
    for (int64_t i = 0; i < q.num_tokens; ++i) {
      const int32_t tok = q.token_ids[i];
      if (tok < 0 || (p.vocab_size > 0 && tok >= p.vocab_size)) {
        return InvalidArgumentError(
            "step: request {}: token {} is id {}; the vocabulary is [0, {})", r, i, tok,
            p.vocab_size > 0 ? p.vocab_size : kInt32Max);
      }
      if (q.embed_source != nullptr && q.embed_source[i] < -1) {
        return InvalidArgumentError("step: request {}: token {} has embed_source = {}", r, i,
                                    q.embed_source[i]);
      }
    }
    total += q.num_tokens;
    if (q.needs_logits) ++logits;
  }
  *num_tokens = total;
  *num_logits = logits;
  return Status::Ok();
}

Status InputBuilder::Build(const std::vector<ScheduledRequest>& step, StepInputs* out) const {
  const InputBuilderParams& p = params_;
  int64_t total = 0, num_logits = 0;
  XRT_RETURN_IF_ERROR(Validate(step, &total, &num_logits));
  Expected<int64_t> token_bucket = p.buckets.TokenBucketFor(total);
  if (!token_bucket.ok()) {
    return token_bucket.status().WithContext("step: the caller must split the step");
  }
  int64_t req_bucket = 0;
  if (num_logits > 0) {
    Expected<int64_t> b = p.buckets.ReqBucketFor(num_logits);
    if (!b.ok()) return b.status().WithContext("step: requests with needs_logits");
    req_bucket = *b;
  }

  const size_t tb = static_cast<size_t>(*token_bucket);
  const size_t max_reqs = static_cast<size_t>(p.max_num_reqs);
  const size_t row = static_cast<size_t>(p.max_blocks_per_req);
  out->token_bucket = *token_bucket;
  out->req_bucket = req_bucket;
  out->num_tokens = total;
  // A new step encodes no image until BuildImages says so.
  out->image_bucket = 0;
  out->image_pixels.clear();
  out->image_cache_rows.clear();
  out->num_reqs = static_cast<int64_t>(step.size());
  out->num_logits = num_logits;
  out->lora_mode = xpk::LoraMode::none;
  for (const ScheduledRequest& q : step) {
    if (q.lora_slot != step.front().lora_slot) {
      out->lora_mode = xpk::LoraMode::mixed;
      break;
    }
    if (q.lora_slot >= 0) out->lora_mode = xpk::LoraMode::single;
  }
  out->token_ids.assign(tb, 0);
  out->positions.assign(tb, 0);
  out->slot_mapping.assign(tb, -1);
  out->embed_source.assign(tb, -1);
  out->lora_slot.assign(tb, -1);
  out->block_tables.assign(max_reqs * row, 0);
  out->seq_lens.assign(max_reqs, 0);
  out->query_start_loc.assign(max_reqs + 1, static_cast<int32_t>(total));
  out->logits_indices.assign(static_cast<size_t>(req_bucket), -1);

  size_t t = 0, j = 0;
  for (size_t r = 0; r < step.size(); ++r) {
    const ScheduledRequest& q = step[r];
    const std::vector<int32_t>& table = *q.block_table;
    out->query_start_loc[r] = static_cast<int32_t>(t);
    out->seq_lens[r] = static_cast<int32_t>(q.num_computed_tokens + q.num_tokens);
    std::copy(table.begin(), table.end(),
              out->block_tables.begin() + static_cast<ptrdiff_t>(r * row));
    for (int64_t i = 0; i < q.num_tokens; ++i, ++t) {
      const int64_t pos = q.num_computed_tokens + i;
      out->token_ids[t] = q.token_ids[i];
      out->positions[t] = static_cast<int32_t>(pos);
      out->slot_mapping[t] = static_cast<int32_t>(
          static_cast<int64_t>(table[static_cast<size_t>(pos / p.block_size)]) * p.block_size +
          pos % p.block_size);
      out->embed_source[t] = q.embed_source != nullptr ? q.embed_source[i] : -1;
      out->lora_slot[t] = q.lora_slot;
    }
    if (q.needs_logits) out->logits_indices[j++] = static_cast<int32_t>(t - 1);
  }
  return Status::Ok();
}

void InputBuilder::Reserve(StepInputs* out) const {
  const size_t tb = static_cast<size_t>(params_.buckets.max_tokens());
  const size_t max_reqs = static_cast<size_t>(params_.max_num_reqs);
  for (std::vector<int32_t>* v : {&out->token_ids, &out->positions, &out->slot_mapping,
                                  &out->embed_source, &out->lora_slot}) {
    v->reserve(tb);
  }
  out->block_tables.reserve(max_reqs * static_cast<size_t>(params_.max_blocks_per_req));
  out->seq_lens.reserve(max_reqs);
  out->query_start_loc.reserve(max_reqs + 1);
  out->logits_indices.reserve(static_cast<size_t>(params_.buckets.max_reqs()));
}

Status InputBuilder::BuildImages(const std::vector<const std::vector<float>*>& pixels,
                                 const std::vector<int64_t>& cache_rows, StepInputs* out) const {
  if (pixels.size() != cache_rows.size())
    return InvalidArgumentError("{} images to encode with {} cache rows", pixels.size(),
                                cache_rows.size());
  int64_t bucket = 0;
  if (!pixels.empty()) {
    XRT_ASSIGN_OR_RETURN(bucket,
                         params_.buckets.ImageBucketFor(static_cast<int64_t>(pixels.size())));
  }
  out->image_bucket = bucket;
  out->image_pixels = pixels;
  out->image_cache_rows = cache_rows;
  return Status::Ok();
}

}  // namespace xrt
