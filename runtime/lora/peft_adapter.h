// PEFT LoRA adapters: reading a directory written by PEFT's save_pretrained
// (adapter_config.json + adapter_model.safetensors), validating it against what an
// artifact was compiled for (LoraSpec), and packing it into the slot layout the
// artifact's LoRA executables read. Used by the compiler (adapters named at compile
// time are packed into the artifact's adapters segment) and by the runtime
// (`xrt run --lora-modules`, POST /v1/load_lora_adapter).
//
// What a PEFT adapter means (PEFT tuners/lora): for an adapted linear layer with
// weight W [out, in], y = W x + scaling * B (A x), where lora_A A is [r, in], lora_B B
// is [out, r], scaling = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), and r /
// lora_alpha are per module from rank_pattern / alpha_pattern (the first key, in file
// order, whose regex `(.*\.)?(key)$` fully matches the module's name, as PEFT's
// get_pattern_key) or else the config's `r` / `lora_alpha`.
//
// Slot layout (what the executables read for one adapter and one target t, R =
// max_lora_rank): A_t [R][in] = lora_A with rows r..R-1 zero, and Bᵀ_t [R][out] =
// (scaling * lora_B)ᵀ with rows r..R-1 zero, so the kernels run with scale 1 and the
// zero padding is numerically inert. A target the adapter does not adapt is all zero.
//
// Thread-safety: every function is reentrant; the structs are plain values.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {

// One (layer, module) the artifact's LoRA executables have slots for.
struct LoraTarget {
  std::string name;  // "model.layers.3.self_attn.q_proj" (decoder module path as in HF Llama)
  int64_t in_features = 0, out_features = 0;
};

// What the artifact was compiled for.
struct LoraSpec {
  int64_t max_lora_rank = 0;  // R
  // Enabled short names, a subset of AllLoraTargetModules(), in that order.
  std::vector<std::string> target_modules;
  // Every layer x enabled module, in slot-buffer order.
  std::vector<LoraTarget> targets;
};

// All seven short names, in this order:
// q_proj k_proj v_proj o_proj gate_proj up_proj down_proj.
const std::vector<std::string>& AllLoraTargetModules();

// InvalidArgument unless `modules` is a non-empty list of distinct names from
// AllLoraTargetModules() (what `--lora-target-modules` accepts); the message names
// the offending entry and lists the valid names.
Status ValidateLoraTargetModules(const std::vector<std::string>& modules);

// The targets of a Llama-family decoder: for each layer l, for each enabled module in
// AllLoraTargetModules() order, "model.layers.{l}.self_attn.{q,k,v,o}_proj" /
// "model.layers.{l}.mlp.{gate,up,down}_proj" with HF's shapes (q: hidden ->
// heads*head_dim; k, v: hidden -> kv_heads*head_dim; o: heads*head_dim -> hidden;
// gate, up: hidden -> intermediate; down: intermediate -> hidden).
// `target_modules` must pass ValidateLoraTargetModules (names it does not know are
// dropped); the spec lists them in AllLoraTargetModules() order.
LoraSpec MakeLoraSpec(int64_t num_layers, int64_t hidden, int64_t intermediate, int64_t num_heads,
                      int64_t num_kv_heads, int64_t head_dim, int64_t max_lora_rank,
                      std::vector<std::string> target_modules);

// An adapter in the slot layout. For target t (an index into spec.targets), a[t] is
// [R][in] (lora_A, rows past the module's rank zero) and bt[t] is [R][out] =
// (scaling * lora_B)ᵀ zero-padded; a target the adapter does not adapt has empty
// vectors (the runtime zero-fills its slot). a.size() == bt.size() == spec.targets.size().
struct PackedLora {
  std::string name, path;
  int64_t rank = 0;                  // largest r over its modules
  std::vector<std::string> modules;  // short names it adapts, AllLoraTargetModules() order
  std::vector<std::vector<float>> a, bt;
  std::string base_model_name_or_path;  // from adapter_config.json, informational
};

// Reads `dir` (adapter_config.json + adapter_model.safetensors; a directory with only
// adapter_model.bin is an error asking to convert it to safetensors), validates it
// against `spec` and packs it. Accepted tensor names: "base_model.model." (optional)
// followed by a decoder module path and ".lora_A.weight" / ".lora_B.weight", the
// module path being "model.layers.{l}.{self_attn,mlp}.{module}" (Llama),
// "model.language_model.layers...." (LLaVA, transformers >= 4.52) or
// "language_model.model.layers...." (older LLaVA). Tensors may be f32, f16 or bf16.
//
// On failure: one InvalidArgument error whose message names the adapter and its
// directory and lists EVERY problem found (as vLLM's PEFTHelper validation does), each
// naming the config field or the tensor: a malformed or missing adapter_config.json,
// peft_type other than LORA, r above spec.max_lora_rank, a module not in
// spec.target_modules, DoRA, modules_to_save, bias / lora_bias, fan_in_fan_out,
// other LoRA variants (aLoRA, QALoRA, BD-LoRA, MonteCLoRA, layer_replication), LoRA on
// anything but the decoder's seven projections (vision tower, projector, lm_head,
// embed_tokens), a layer beyond the model, a lora_A without lora_B or the reverse,
// shapes that do not fit the base model or the config's r, unsupported dtypes.
// Repeats of one problem across layers are reported once with a count.
Expected<PackedLora> LoadPeftAdapter(const std::string& name, const std::string& dir,
                                     const LoraSpec& spec);

// Parses `--lora-modules` arguments, each "name=path" (vLLM's form), into (name, path)
// pairs in order. InvalidArgument naming the argument for a missing '=', an empty name
// or path, or a name given twice.
Expected<std::vector<std::pair<std::string, std::string>>> ParseLoraModules(
    const std::vector<std::string>& args);

// ---- Packed byte layout (the artifact's adapters segment) ----
//
// One adapter is PackedLoraFloats(spec) little-endian f32 values: for each target t in
// spec.targets order, A_t ([R][in], row-major) then Bᵀ_t ([R][out], row-major), with
// the contents defined above (all zero for a target the adapter does not adapt).
// Target t's A starts at float offset sum over s < t of R * (in_s + out_s), its Bᵀ
// R * in_t floats later.

// Number of floats of one packed adapter.
int64_t PackedLoraFloats(const LoraSpec& spec);

// Writes `lora` (packed for `spec`) in the packed layout to out[0, PackedLoraFloats(spec)).
void WritePackedLora(const PackedLora& lora, const LoraSpec& spec, float* out);

// A read-only view of one packed adapter, e.g. inside a mapped artifact. Does not own
// the data, which must outlive the view.
class PackedLoraView {
 public:
  // InvalidArgument unless `n_floats` == PackedLoraFloats(spec).
  static Expected<PackedLoraView> Make(const float* data, int64_t n_floats, const LoraSpec& spec);

  int64_t num_targets() const { return static_cast<int64_t>(a_offsets_.size()); }
  // Target t's A ([R][in]) and Bᵀ ([R][out]), 0 <= t < num_targets().
  const float* a(int64_t t) const { return data_ + a_offsets_[t]; }
  const float* bt(int64_t t) const { return data_ + a_offsets_[t] + rank_ * in_features_[t]; }

 private:
  const float* data_ = nullptr;
  int64_t rank_ = 0;
  std::vector<int64_t> a_offsets_, in_features_;
};

}  // namespace xrt
