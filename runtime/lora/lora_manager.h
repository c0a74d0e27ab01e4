// Serving-time LoRA: the adapters a server knows (LoraRegistry) and the adapter
// slots the compiled executables read (LoraManager).
//
// An artifact compiled with --enable-lora has, for every target module t
// (LoraSpec::targets), two slot buffers the LoRA executables bind
// (BindingKind::lora_a / lora_b):
//   a[t]  [max_loras][R][in_t]   lora_A of the adapter in each slot
//   b[t]  [max_loras][R][out_t]  (scaling * lora_B)ᵀ of the adapter in each slot
// with R = max_lora_rank and the packed layout of runtime/lora/peft_adapter.h.
// Loading, unloading or swapping an adapter only copies floats into these
// buffers: nothing is compiled, and no executable changes.
//
// LoraRegistry: name -> adapter (packed floats + metadata). More adapters may be
// registered than there are slots. Adapters are shared_ptrs: a request keeps
// its adapter alive, so unloading one that requests still use only removes its
// name (new requests cannot select it; running ones finish with it).
// Thread-safe (the HTTP threads load/unload, the request processor looks up).
//
// LoraManager: assigns the adapters of one step to slots, least recently used
// first (an adapter already in a slot keeps it), and copies an adapter into its
// slot when it is not there yet (a "swap" when the slot held another adapter).
// Thread-compatible: the engine thread, between steps (the executor reads the
// buffers only while a step runs on that thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/lora/peft_adapter.h"

namespace xpk {
struct LoraConfig;
}  // namespace xpk

namespace xrt {

// One registered adapter: PackedLoraFloats(spec) floats in the packed layout.
struct LoraAdapter {
  std::string name;
  std::string path;  // the PEFT directory, or "" for one packed into the artifact
  std::string base_model_name_or_path;
  int64_t id = 0;  // > 0, unique within its registry: the prefix-cache key
  int64_t rank = 0;
  std::vector<std::string> modules;  // short names it adapts
  bool from_artifact = false;
  std::vector<float> owned;     // the packed floats, unless they live in the artifact
  const float* data = nullptr;  // owned.data() or into the mapped artifact
};

// The LoRA side of an artifact: its spec (targets, R) and slot count.
struct LoraGeometry {
  LoraSpec spec;
  int64_t max_loras = 0;
};

// The artifact's LoRA geometry (nullptr config: LoRA not compiled in).
LoraGeometry LoraGeometryOf(const xpk::LoraConfig* config);

class LoraRegistry {
 public:
  explicit LoraRegistry(LoraGeometry geometry) : geometry_(std::move(geometry)) {}

  // Reads, validates and packs the PEFT adapter in `dir` under `name`
  // (LoadPeftAdapter's errors: InvalidArgument listing every problem), or
  // InvalidArgument when the name is taken. Returns the registered adapter.
  Expected<std::shared_ptr<const LoraAdapter>> Load(const std::string& name,
                                                    const std::string& dir);
  // Registers an adapter already packed (the artifact's); `data` must outlive
  // the registry. InvalidArgument when the name is taken.
  Expected<std::shared_ptr<const LoraAdapter>> AddPacked(LoraAdapter adapter);
  // Serves adapters of rank <= `rank` only (xrt run --max-lora-rank, at most the
  // compiled max_lora_rank): Load and AddPacked refuse higher ranks.
  // InvalidArgument for a rank outside [1, compiled R] or an adapter already
  // registered above it.
  Status LimitRank(int64_t rank);
  // Unregisters `name`; NotFound when it is not registered.
  Status Unload(const std::string& name);
  // nullptr when `name` is not registered.
  std::shared_ptr<const LoraAdapter> Find(const std::string& name) const;
  // Every registered adapter, by name.
  std::vector<std::shared_ptr<const LoraAdapter>> List() const;

  const LoraGeometry& geometry() const { return geometry_; }

 private:
  Expected<std::shared_ptr<const LoraAdapter>> Insert(LoraAdapter adapter);

  const LoraGeometry geometry_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const LoraAdapter>> by_name_;
  int64_t next_id_ = 1;
  int64_t max_rank_ = 0;  // 0: the compiled max_lora_rank
};

// Slot buffers as the executor binds them: a[t], b[t] per target.
struct LoraSlotBuffers {
  std::vector<float*> a, b;
};

struct LoraManagerStats {
  int64_t loads = 0;  // adapters copied into a slot (incl. into an empty one)
  int64_t swaps = 0;  // of which replaced another adapter
};

class LoraManager {
 public:
  // With `allocate`, owns zeroed slot buffers (buffers()); without, only the
  // bookkeeping runs (the trace replay, which runs no kernels).
  LoraManager(LoraGeometry geometry, bool allocate);
  ~LoraManager();
  LoraManager(const LoraManager&) = delete;
  LoraManager& operator=(const LoraManager&) = delete;

  // Puts every adapter of `adapters` (distinct, at most max_loras) into a slot
  // and returns each one's slot, in order. Adapters already in a slot stay;
  // the others take free slots, then the least recently used slots not needed
  // by this step. InvalidArgument for more adapters than slots, a duplicate
  // or a null one.
  Expected<std::vector<int32_t>> Activate(
      const std::vector<std::shared_ptr<const LoraAdapter>>& adapters);

  const LoraSlotBuffers& buffers() const { return buffers_; }
  const LoraGeometry& geometry() const { return geometry_; }
  const LoraManagerStats& stats() const { return stats_; }
  // The adapter id in slot `s` (0: empty).
  int64_t slot_adapter(int64_t s) const { return slots_[s].adapter_id; }

 private:
  void CopyIntoSlot(const LoraAdapter& adapter, int64_t slot);

  struct Slot {
    int64_t adapter_id = 0;
    uint64_t last_used = 0;
  };
  const LoraGeometry geometry_;
  std::vector<Slot> slots_;
  LoraSlotBuffers buffers_;
  std::vector<float*> owned_;
  uint64_t clock_ = 0;
  LoraManagerStats stats_;
};

}  // namespace xrt
