#include "runtime/engine/encoder_cache.h"

#include <algorithm>

namespace xrt {

Expected<EncoderCache> EncoderCache::Create(EncoderCacheParams params) {
  if (params.item_rows < 1 || params.capacity_rows < params.item_rows)
    return InvalidArgumentError(
        "encoder cache: {} rows cannot hold one item of {} rows (item_rows must be >= 1)",
        params.capacity_rows, params.item_rows);
  return EncoderCache(params);
}

EncoderCache::EncoderCache(EncoderCacheParams params)
    : params_(params), slot_used_(params.capacity_rows / params.item_rows, false) {}

bool EncoderCache::Contains(const BlockHash& hash) const { return entries_.count(hash) != 0; }

int64_t EncoderCache::Row(const BlockHash& hash) const {
  auto it = entries_.find(hash);
  return it == entries_.end() ? -1 : it->second.slot * params_.item_rows;
}

Status EncoderCache::Reference(const BlockHash& hash, RequestId request) {
  auto it = entries_.find(hash);
  if (it == entries_.end())
    return FailedPreconditionError("encoder cache: no entry to reference for request {}", request);
  Entry& e = it->second;
  if (!e.users.insert(request).second) return Status::Ok();
  if (e.valid) {
    ++hits_;
    if (e.users.size() == 1) freeable_.erase(std::find(freeable_.begin(), freeable_.end(), hash));
  }
  by_request_[request].push_back(hash);
  return Status::Ok();
}

int64_t EncoderCache::num_available_slots() const {
  return static_cast<int64_t>(std::count(slot_used_.begin(), slot_used_.end(), false)) +
         static_cast<int64_t>(freeable_.size());
}

Expected<int64_t> EncoderCache::Allocate(const BlockHash& hash, RequestId request) {
  if (Contains(hash))
    return FailedPreconditionError("encoder cache: request {} allocates an entry that exists",
                                   request);
  auto free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  if (free_slot == slot_used_.end()) {
    if (freeable_.empty())
      return ResourceExhaustedError("encoder cache: all {} slots are in use by running requests",
                                    slot_used_.size());
    Drop(freeable_.front());  // pops it from freeable_
    ++evictions_;
    free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  }
  *free_slot = true;
  Entry e;
  e.slot = free_slot - slot_used_.begin();
  e.users.insert(request);
  entries_.emplace(hash, std::move(e));
  pending_.push_back(hash);
  by_request_[request].push_back(hash);
  ++misses_;
  return Row(hash);
}

void EncoderCache::MarkEncoded() {
  for (const BlockHash& h : pending_) {
    Entry& e = entries_.at(h);
    e.valid = true;
    if (e.users.empty()) freeable_.push_back(h);
  }
  pending_.clear();
}

std::vector<BlockHash> EncoderCache::Pending() const { return pending_; }

void EncoderCache::Release(const BlockHash& hash, RequestId request) {
  auto it = entries_.find(hash);
  if (it == entries_.end() || it->second.users.erase(request) == 0) return;
  auto r = by_request_.find(request);
  if (r != by_request_.end()) {
    auto& list = r->second;
    list.erase(std::find(list.begin(), list.end(), hash));
    if (list.empty()) by_request_.erase(r);
  }
  Entry& e = it->second;
  if (!e.users.empty()) return;
  if (e.valid) {
    freeable_.push_back(hash);
  } else {
    pending_.erase(std::find(pending_.begin(), pending_.end(), hash));
    Drop(hash);
  }
}

void EncoderCache::ReleaseRequest(RequestId request) {
  auto r = by_request_.find(request);
  if (r == by_request_.end()) return;
  const std::vector<BlockHash> hashes = r->second;
  for (const BlockHash& h : hashes) Release(h, request);
}

void EncoderCache::Drop(const BlockHash& hash) {
  auto it = entries_.find(hash);
  slot_used_[it->second.slot] = false;
  auto f = std::find(freeable_.begin(), freeable_.end(), hash);
  if (f != freeable_.end()) freeable_.erase(f);
  entries_.erase(it);
}

}  // namespace xrt
