// Executor: runs an artifact's executables (static command lists) on the CPU.
//
// At creation every binding of every command is resolved to a raw pointer: the
// weights are used in place from the mapped artifact, one arena (sized for the
// largest executable) holds all scratch, each executable kind has one io buffer
// (sized for its largest bucket) holding inputs and outputs, and the KV cache is
// supplied by the caller. Running an executable is then a loop over prepared
// commands: generated dispatches split over the thread pool by workgroup, and
// runtime microkernels (matmul, paged attention, LoRA shrink/expand). Nothing
// is compiled.
//
// Thread-compatible: one Run at a time. The Artifact, ThreadPool and KV memory
// must outlive the Executor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/executor/code_module.h"
#include "runtime/kernels/attention.h"  // KvCacheDtype

namespace xpk {
struct Executable;
struct TensorSpec;
}  // namespace xpk

namespace xrt {

class Artifact;
class ThreadPool;

// The KV cache as the executor sees it: one key and one value array per layer,
// each [num_blocks][block_size][num_kv_heads][head_dim] of `dtype`.
struct KvCacheView {
  std::vector<void*> keys;
  std::vector<void*> values;
  int64_t num_blocks = 0;
  KvCacheDtype dtype = KvCacheDtype::kF32;
};

struct ExecutorParams {
  const Artifact* artifact = nullptr;
  ThreadPool* pool = nullptr;
  KvCacheView kv;
  // A model with vision: the encoder-output cache lm_step reads image rows from,
  // [VisionConfig.encoder_cache_rows][hidden_size] f32.
  float* encoder_cache = nullptr;
  // An artifact with LoRA: each target's adapter slots (runtime/lora/lora_manager.h),
  // indexed like Manifest.lora.targets: lora_a[t] [max_loras][R][in_t],
  // lora_b[t] [max_loras][R][out_t] f32.
  std::vector<float*> lora_a, lora_b;
};

// Where Executor::Run's time goes, by command: "dispatch rope_q" (a dispatch by
// its label, less the layer), "matmul q4_1 576x1536 (int8 compute)" (format,
// N x K, compute type), "paged_attention", ... (lm_step_bench --profile).
struct CommandProfile {
  struct Entry {
    int64_t calls = 0;
    double seconds = 0;
    int64_t weight_bytes = 0;  // matmuls: the packed weight's bytes, summed over calls
  };
  std::map<std::string, Entry> by_label;
};

class Executor {
 public:
  static Expected<std::unique_ptr<Executor>> Create(const ExecutorParams& params);
  ~Executor();

  // The io buffer executable `e` reads its inputs from and writes its outputs to.
  uint8_t* io(const xpk::Executable& e);
  // Address of input/output `name` of `e` in its io buffer, or NotFound.
  Expected<uint8_t*> Tensor(const xpk::Executable& e, const std::string& name);

  // Runs `e`'s command list. With `active_rows` >= 0, the commands marked
  // dynamic_rows (row-wise over the bucket: schemas/artifact.fbs) run only
  // their first `active_rows` rows: the step's real tokens (lm_step) or
  // requests (lm_logits); their padding rows keep stale values, which nothing
  // reads. Errors (e.g. a bad slot in the inputs) leave the outputs undefined
  // but the executor usable.
  Status Run(const xpk::Executable& e, int64_t active_rows = -1);

  uint64_t arena_bytes() const { return arena_size_; }

  // While set (borrowed; null to stop), Run adds each command's wall time to
  // `profile`. Not for concurrent Runs.
  void set_profile(CommandProfile* profile) { profile_ = profile; }

 private:
  struct Prepared;
  struct PreparedCommand;
  Status RunCommand(const PreparedCommand& pc, const xpk::Executable& e, int64_t active_rows);
  explicit Executor(const ExecutorParams& p);
  Status Prepare();

  ExecutorParams p_;
  std::unique_ptr<CodeModule> code_;
  uint8_t* arena_ = nullptr;
  uint64_t arena_size_ = 0;
  std::map<int, uint8_t*> io_;  // by ExecutableKind
  std::map<const xpk::Executable*, std::unique_ptr<Prepared>> prepared_;
  CommandProfile* profile_ = nullptr;
};

}  // namespace xrt
