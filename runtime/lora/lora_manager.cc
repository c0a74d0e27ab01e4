#include "runtime/lora/lora_manager.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "schemas/artifact_generated.h"

namespace xrt {

LoraGeometry LoraGeometryOf(const xpk::LoraConfig* config) {
  LoraGeometry g;
  if (!config) return g;
  g.max_loras = config->max_loras();
  g.spec.max_lora_rank = config->max_lora_rank();
  if (config->target_modules())
    for (const flatbuffers::String* m : *config->target_modules())
      g.spec.target_modules.push_back(m->str());
  if (config->targets())
    for (const xpk::LoraTarget* t : *config->targets())
      g.spec.targets.push_back({t->name()->str(), t->in_features(), t->out_features()});
  return g;
}

// ---------------------------------------------------------------------------
// LoraRegistry

Expected<std::shared_ptr<const LoraAdapter>> LoraRegistry::Load(const std::string& name,
                                                                const std::string& dir) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_name_.count(name))
      return InvalidArgumentError("LoRA adapter '{}' is already loaded", name);
  }
  // Reading and packing happen outside the lock: other requests go on meanwhile.
  XRT_ASSIGN_OR_RETURN(PackedLora packed, LoadPeftAdapter(name, dir, geometry_.spec));
  LoraAdapter a;
  a.name = name;
  a.path = dir;
  a.base_model_name_or_path = packed.base_model_name_or_path;
  a.rank = packed.rank;
  a.modules = packed.modules;
  a.owned.resize(PackedLoraFloats(geometry_.spec));
  WritePackedLora(packed, geometry_.spec, a.owned.data());
  a.data = a.owned.data();
  return Insert(std::move(a));
}

Expected<std::shared_ptr<const LoraAdapter>> LoraRegistry::AddPacked(LoraAdapter adapter) {
  if (!adapter.data && adapter.owned.empty())
    return InvalidArgumentError("LoRA adapter '{}' has no data", adapter.name);
  if (!adapter.owned.empty()) adapter.data = adapter.owned.data();
  return Insert(std::move(adapter));
}

Status LoraRegistry::LimitRank(int64_t rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank < 1 || rank > geometry_.spec.max_lora_rank)
    return InvalidArgumentError(
        "max_lora_rank {} must be in [1, {}] (the artifact's --max-lora-rank)", rank,
        geometry_.spec.max_lora_rank);
  for (const auto& [name, a] : by_name_)
    if (a->rank > rank)
      return InvalidArgumentError(
          "LoRA adapter '{}': LoRA rank {} is greater than max_lora_rank {}", name, a->rank, rank);
  max_rank_ = rank;
  return Status::Ok();
}

Expected<std::shared_ptr<const LoraAdapter>> LoraRegistry::Insert(LoraAdapter adapter) {
  std::lock_guard<std::mutex> lock(mu_);
  if (adapter.name.empty()) return InvalidArgumentError("a LoRA adapter needs a name");
  if (max_rank_ > 0 && adapter.rank > max_rank_)
    return InvalidArgumentError("LoRA adapter '{}': LoRA rank {} is greater than max_lora_rank {}",
                                adapter.name, adapter.rank, max_rank_);
  if (by_name_.count(adapter.name))
    return InvalidArgumentError("LoRA adapter '{}' is already loaded", adapter.name);
  adapter.id = next_id_++;
  auto shared = std::make_shared<const LoraAdapter>(std::move(adapter));
  by_name_[shared->name] = shared;
  return shared;
}

Status LoraRegistry::Unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (by_name_.erase(name) == 0) return NotFoundError("LoRA adapter '{}' is not loaded", name);
  return Status::Ok();
}

std::shared_ptr<const LoraAdapter> LoraRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const LoraAdapter>> LoraRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const LoraAdapter>> out;
  for (const auto& [name, a] : by_name_) out.push_back(a);
  return out;
}

// ---------------------------------------------------------------------------
// LoraManager

LoraManager::LoraManager(LoraGeometry geometry, bool allocate)
    : geometry_(std::move(geometry)), slots_(std::max<int64_t>(geometry_.max_loras, 0)) {
  if (!allocate) return;
  const int64_t n = geometry_.max_loras, r = geometry_.spec.max_lora_rank;
  auto alloc = [&](int64_t features) {
    const size_t bytes = (static_cast<size_t>(n * r * features) * sizeof(float) + 63) / 64 * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64)));
    if (p) std::memset(p, 0, bytes);
    owned_.push_back(p);
    return p;
  };
  for (const LoraTarget& t : geometry_.spec.targets) {
    buffers_.a.push_back(alloc(t.in_features));
    buffers_.b.push_back(alloc(t.out_features));
  }
}

LoraManager::~LoraManager() {
  for (float* p : owned_) std::free(p);
}

void LoraManager::CopyIntoSlot(const LoraAdapter& adapter, int64_t slot) {
  if (buffers_.a.empty()) return;  // bookkeeping only
  const int64_t r = geometry_.spec.max_lora_rank;
  const float* src = adapter.data;
  for (size_t t = 0; t < geometry_.spec.targets.size(); ++t) {
    const LoraTarget& target = geometry_.spec.targets[t];
    const size_t na = static_cast<size_t>(r * target.in_features);
    const size_t nb = static_cast<size_t>(r * target.out_features);
    std::memcpy(buffers_.a[t] + slot * na, src, na * sizeof(float));
    src += na;
    std::memcpy(buffers_.b[t] + slot * nb, src, nb * sizeof(float));
    src += nb;
  }
}

Expected<std::vector<int32_t>> LoraManager::Activate(
    const std::vector<std::shared_ptr<const LoraAdapter>>& adapters) {
  if (static_cast<int64_t>(adapters.size()) > geometry_.max_loras)
    return InvalidArgumentError("{} LoRA adapters in one step, but the artifact has {} slots",
                                adapters.size(), geometry_.max_loras);
  std::set<int64_t> ids;
  for (const auto& a : adapters) {
    if (!a) return InvalidArgumentError("a null LoRA adapter");
    if (!ids.insert(a->id).second)
      return InvalidArgumentError("LoRA adapter '{}' is listed twice", a->name);
  }
  ++clock_;
  std::vector<int32_t> out(adapters.size(), -1);
  std::vector<bool> needed(slots_.size(), false);
  // Adapters already resident keep their slot.
  for (size_t i = 0; i < adapters.size(); ++i)
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].adapter_id == adapters[i]->id) {
        out[i] = static_cast<int32_t>(s);
        needed[s] = true;
        slots_[s].last_used = clock_;
      }
  // The others: a free slot, else the least recently used one this step does not need.
  for (size_t i = 0; i < adapters.size(); ++i) {
    if (out[i] >= 0) continue;
    int64_t best = -1;
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (needed[s]) continue;
      if (best < 0 || (slots_[s].adapter_id == 0) > (slots_[best].adapter_id == 0) ||
          ((slots_[s].adapter_id == 0) == (slots_[best].adapter_id == 0) &&
           slots_[s].last_used < slots_[best].last_used))
        best = static_cast<int64_t>(s);
    }
    if (best < 0) return InternalError("no free LoRA slot for adapter '{}'", adapters[i]->name);
    if (slots_[best].adapter_id != 0) ++stats_.swaps;
    ++stats_.loads;
    CopyIntoSlot(*adapters[i], best);
    slots_[best].adapter_id = adapters[i]->id;
    slots_[best].last_used = clock_;
    needed[best] = true;
    out[i] = static_cast<int32_t>(best);
  }
  return out;
}

}  // namespace xrt
