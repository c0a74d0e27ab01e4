#include "runtime/lora/peft_adapter.h"

#include <sys/stat.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "compiler/frontend/hf_config.h"
#include "compiler/frontend/model_source.h"
#include "compiler/frontend/safetensors.h"
#include "runtime/base/json_parse.h"

namespace xrt {
namespace {

// Ordered: rank_pattern / alpha_pattern keys are tried in file order (PEFT iterates the
// dict, first match wins).
using Json = nlohmann::ordered_json;

constexpr char kConfigFile[] = "adapter_config.json";
constexpr char kWeightsFile[] = "adapter_model.safetensors";
constexpr char kPickleFile[] = "adapter_model.bin";
constexpr char kTargetsOnly[] = "the artifact has LoRA on the decoder's q/k/v/o/gate/up/down only";

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The problems found in one adapter. A problem repeated across layers (the same shape
// mismatch in every layer, say) is added under one key and reported once with a count.
class Problems {
 public:
  void Add(const std::string& key, std::string message) {
    auto [it, inserted] = index_.emplace(key, items_.size());
    if (!inserted) {
      ++items_[it->second].repeats;
      return;
    }
    items_.push_back({std::move(message), 0});
  }
  void Add(std::string message) {
    std::string key = message;
    Add(key, std::move(message));
  }
  bool empty() const { return items_.empty(); }

  // "<problem>" or "N problems: (1) <problem>; (2) <problem>; ...".
  std::string Render() const {
    auto one = [](const Item& item) {
      if (item.repeats == 0) return item.message;
      return fmt::format("{} (and {} more like it)", item.message, item.repeats);
    };
    if (items_.size() == 1) return one(items_[0]);
    std::string out = fmt::format("{} problems:", items_.size());
    for (size_t i = 0; i < items_.size(); ++i) {
      out += fmt::format("{} ({}) {}", i == 0 ? "" : ";", i + 1, one(items_[i]));
    }
    return out;
  }

 private:
  struct Item {
    std::string message;
    int64_t repeats;
  };
  std::vector<Item> items_;
  std::map<std::string, size_t> index_;
};

// One rank_pattern / alpha_pattern entry, its key compiled as PEFT matches it.
template <typename T>
struct PatternEntry {
  std::string key;
  std::regex re;
  T value;
};

// The parts of adapter_config.json that decide the packed values; `usable` is false
// when r or lora_alpha could not be read (the tensors are still checked).
struct AdapterConfig {
  bool usable = false;
  int64_t r = 0;
  double lora_alpha = 0;
  bool use_rslora = false;
  std::vector<PatternEntry<int64_t>> rank_pattern;
  std::vector<PatternEntry<double>> alpha_pattern;
  std::string base_model_name_or_path;
};

std::string JsonText(const Json& j) { return j.dump(); }

bool IsPositiveInteger(const Json& j) {
  return (j.is_number_integer() && j.get<int64_t>() > 0) ||
         (j.is_number_float() && j.get<double>() >= 1 &&
          std::floor(j.get<double>()) == j.get<double>() && j.get<double>() < 9.0e15);
}
int64_t AsInteger(const Json& j) {
  return j.is_number_integer() ? j.get<int64_t>() : static_cast<int64_t>(j.get<double>());
}
bool IsFiniteNumber(const Json& j) { return j.is_number() && std::isfinite(j.get<double>()); }

// A boolean field that must not be true; null and absent read as false.
void CheckFalse(const Json& cfg, const char* field, const std::string& why, Problems* p) {
  auto it = cfg.find(field);
  if (it == cfg.end() || it->is_null()) return;
  if (!it->is_boolean()) {
    p->Add(
        fmt::format("{}: field '{}' must be a boolean, got {}", kConfigFile, field, JsonText(*it)));
  } else if (it->get<bool>()) {
    p->Add(fmt::format("{}: {} is true: {}", kConfigFile, field, why));
  }
}

// A field that must be null, absent or empty.
void CheckEmpty(const Json& cfg, const char* field, const std::string& why, Problems* p) {
  auto it = cfg.find(field);
  if (it == cfg.end() || it->is_null() || ((it->is_array() || it->is_object()) && it->empty())) {
    return;
  }
  p->Add(fmt::format("{}: {} is {}: {}", kConfigFile, field, JsonText(*it), why));
}

template <typename T>
void ParsePattern(const Json& cfg, const char* field, bool integer,
                  std::vector<PatternEntry<T>>* out, Problems* p) {
  auto it = cfg.find(field);
  if (it == cfg.end() || it->is_null()) return;
  if (!it->is_object()) {
    p->Add(fmt::format("{}: field '{}' must be an object of module name patterns, got {}",
                       kConfigFile, field, JsonText(*it)));
    return;
  }
  for (const auto& [key, value] : it->items()) {
    bool ok = integer ? IsPositiveInteger(value) : IsFiniteNumber(value);
    if (!ok) {
      p->Add(fmt::format("{}: {}['{}'] must be {}, got {}", kConfigFile, field, key,
                         integer ? "a positive integer" : "a number", JsonText(value)));
      continue;
    }
    PatternEntry<T> e;
    e.key = key;
    e.value =
        integer ? static_cast<T>(AsInteger(value)) : static_cast<T>(value.template get<double>());
    // PEFT's get_pattern_key: re.match(rf"(.*\.)?({key})$", module_name).
    try {
      e.re = std::regex("(.*\\.)?(" + key + ")", std::regex::ECMAScript);
    } catch (const std::regex_error& err) {
      p->Add(fmt::format("{}: {} key '{}' is not a valid regular expression ({})", kConfigFile,
                         field, key, err.what()));
      continue;
    }
    out->push_back(std::move(e));
  }
}

// Returns the config (usable only if r and lora_alpha were read); adds every problem.
AdapterConfig ParseAdapterConfig(const std::string& dir, Problems* p) {
  AdapterConfig c;
  std::string path = dir + "/" + kConfigFile;
  if (!IsRegularFile(path)) {
    p->Add(fmt::format("{} is missing (a PEFT adapter directory has {} and {})", kConfigFile,
                       kConfigFile, kWeightsFile));
    return c;
  }
  Expected<std::string> text = xcc::ReadTextFile(path);
  if (!text.ok()) {
    p->Add(text.status().message());
    return c;
  }
  bool too_deep = false;
  Json cfg = ParseJsonBounded<Json>(*text, &too_deep);
  if (too_deep) {
    p->Add(fmt::format("{}: nests more than {} levels deep", kConfigFile, kMaxJsonDepth));
    return c;
  }
  if (cfg.is_discarded() || !cfg.is_object()) {
    p->Add(fmt::format("{}: not a JSON object", kConfigFile));
    return c;
  }

  if (auto it = cfg.find("peft_type"); it != cfg.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "LORA") {
      p->Add(fmt::format("{}: peft_type is {}: only LORA adapters are supported", kConfigFile,
                         JsonText(*it)));
    }
  }
  if (auto it = cfg.find("base_model_name_or_path"); it != cfg.end() && it->is_string()) {
    c.base_model_name_or_path = it->get<std::string>();
  }

  bool have_r = false, have_alpha = false;
  auto r = cfg.find("r");
  if (r == cfg.end()) {
    p->Add(fmt::format("{}: field 'r' is missing", kConfigFile));
  } else if (!IsPositiveInteger(*r)) {
    p->Add(
        fmt::format("{}: field 'r' must be a positive integer, got {}", kConfigFile, JsonText(*r)));
  } else {
    c.r = AsInteger(*r);
    have_r = true;
  }
  auto alpha = cfg.find("lora_alpha");
  if (alpha == cfg.end()) {
    p->Add(fmt::format("{}: field 'lora_alpha' is missing", kConfigFile));
  } else if (!IsFiniteNumber(*alpha)) {
    p->Add(fmt::format("{}: field 'lora_alpha' must be a number, got {}", kConfigFile,
                       JsonText(*alpha)));
  } else {
    c.lora_alpha = alpha->get<double>();
    have_alpha = true;
  }
  if (auto it = cfg.find("use_rslora"); it != cfg.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      p->Add(fmt::format("{}: field 'use_rslora' must be a boolean, got {}", kConfigFile,
                         JsonText(*it)));
    } else {
      c.use_rslora = it->get<bool>();
    }
  }
  ParsePattern(cfg, "rank_pattern", /*integer=*/true, &c.rank_pattern, p);
  ParsePattern(cfg, "alpha_pattern", /*integer=*/false, &c.alpha_pattern, p);

  // What vLLM's PEFTHelper rejects, then the rest of PEFT's variants that change what
  // the adapter computes.
  CheckEmpty(cfg, "modules_to_save", "only modules_to_save null is supported", p);
  CheckFalse(cfg, "use_dora", "DoRA is not supported", p);
  if (auto it = cfg.find("bias"); it != cfg.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "none") {
      p->Add(fmt::format("{}: bias is {}: adapter bias is not supported (only \"none\")",
                         kConfigFile, JsonText(*it)));
    }
  }
  CheckFalse(cfg, "lora_bias", "a bias on lora_B is not supported", p);
  CheckFalse(cfg, "fan_in_fan_out", "only [out, in] linear weights (as Llama's) are supported", p);
  CheckFalse(cfg, "use_qalora", "QALoRA is not supported", p);
  CheckEmpty(cfg, "alora_invocation_tokens", "activated LoRA (aLoRA) is not supported", p);
  CheckEmpty(cfg, "use_bdlora", "block-diagonal LoRA is not supported", p);
  CheckEmpty(cfg, "monteclora_config", "MonteCLoRA is not supported", p);
  CheckEmpty(cfg, "layer_replication", "layer replication is not supported", p);
  CheckEmpty(cfg, "trainable_token_indices", "trainable tokens are not supported", p);

  c.usable = have_r && have_alpha;
  return c;
}

// The r and lora_alpha of module `path` (its name in the base model, e.g.
// "model.layers.0.self_attn.q_proj") and where they came from.
struct ModuleScale {
  int64_t r;
  double alpha;
  std::string r_source;  // "r" or "rank_pattern['key']"
};
ModuleScale ResolveModule(const AdapterConfig& c, const std::string& path) {
  ModuleScale s{c.r, c.lora_alpha, "r"};
  for (const PatternEntry<int64_t>& e : c.rank_pattern) {
    if (std::regex_match(path, e.re)) {
      s.r = e.value;
      s.r_source = fmt::format("rank_pattern['{}']", e.key);
      break;
    }
  }
  for (const PatternEntry<double>& e : c.alpha_pattern) {
    if (std::regex_match(path, e.re)) {
      s.alpha = e.value;
      break;
    }
  }
  return s;
}

// The attention / MLP group a short name lives in, "" if it is not one of the seven.
const char* ModuleGroup(const std::string& short_name) {
  const std::vector<std::string>& all = AllLoraTargetModules();
  auto it = std::find(all.begin(), all.end(), short_name);
  if (it == all.end()) return "";
  return it - all.begin() < 4 ? "self_attn" : "mlp";
}

// A decoder module path in any of the layouts PEFT writes.
struct DecoderModule {
  int64_t layer = -1;
  std::string short_name;
  std::string canonical;  // "model.layers.{l}.{group}.{short}", as LoraTarget::name
};
std::optional<DecoderModule> ParseDecoderModule(const std::string& path) {
  static const char* const kLayerPrefixes[] = {
      "model.layers.",                 // Llama
      "model.language_model.layers.",  // LLaVA, transformers >= 4.52
      "language_model.model.layers.",  // LLaVA, older
  };
  for (const char* prefix : kLayerPrefixes) {
    if (!StartsWith(path, prefix)) continue;
    std::string rest = path.substr(std::strlen(prefix));
    size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || dot > 9) return std::nullopt;
    std::string digits = rest.substr(0, dot);
    if (!std::all_of(digits.begin(), digits.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; })) {
      return std::nullopt;
    }
    std::string tail = rest.substr(dot + 1);
    size_t dot2 = tail.find('.');
    if (dot2 == std::string::npos) return std::nullopt;
    DecoderModule m;
    m.layer = std::stoll(digits);
    m.short_name = tail.substr(dot2 + 1);
    std::string group = tail.substr(0, dot2);
    if (group != ModuleGroup(m.short_name)) return std::nullopt;
    m.canonical = fmt::format("model.layers.{}.{}.{}", m.layer, group, m.short_name);
    return m;
  }
  return std::nullopt;
}

// What an unsupported module is, for the message.
std::string ModuleKind(const std::string& path) {
  if (path.find("vision_tower") != std::string::npos ||
      path.find("vision_model") != std::string::npos) {
    return "the vision tower";
  }
  if (path.find("multi_modal_projector") != std::string::npos) return "the multi-modal projector";
  if (EndsWith(path, "lm_head")) return "lm_head";
  if (EndsWith(path, "embed_tokens")) return "embed_tokens";
  return "a module other than the decoder's projections";
}

bool SupportedDType(xcc::SourceDType t) {
  return t == xcc::SourceDType::kF32 || t == xcc::SourceDType::kF16 || t == xcc::SourceDType::kBF16;
}

// The lora_A / lora_B tensors found for one target.
struct TargetTensors {
  const xcc::SourceTensor* a = nullptr;
  const xcc::SourceTensor* b = nullptr;
  std::string path;  // the module's name in the adapter (without "base_model.model.")
};

Status Fail(const std::string& name, const std::string& dir, const Problems& p) {
  return InvalidArgumentError("LoRA adapter '{}' ({}): {}", name, dir, p.Render());
}

}  // namespace

const std::vector<std::string>& AllLoraTargetModules() {
  static const std::vector<std::string> kAll = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                "gate_proj", "up_proj", "down_proj"};
  return kAll;
}

Status ValidateLoraTargetModules(const std::vector<std::string>& modules) {
  const std::vector<std::string>& all = AllLoraTargetModules();
  if (modules.empty()) {
    return InvalidArgumentError("LoRA target modules: empty list (valid: {})",
                                fmt::join(all, ", "));
  }
  std::set<std::string> seen;
  for (const std::string& m : modules) {
    if (std::find(all.begin(), all.end(), m) == all.end()) {
      return InvalidArgumentError("LoRA target module '{}' is not one of {}", m,
                                  fmt::join(all, ", "));
    }
    if (!seen.insert(m).second) {
      return InvalidArgumentError("LoRA target module '{}' is listed twice", m);
    }
  }
  return Status::Ok();
}

LoraSpec MakeLoraSpec(int64_t num_layers, int64_t hidden, int64_t intermediate, int64_t num_heads,
                      int64_t num_kv_heads, int64_t head_dim, int64_t max_lora_rank,
                      std::vector<std::string> target_modules) {
  LoraSpec spec;
  spec.max_lora_rank = max_lora_rank;
  for (const std::string& m : AllLoraTargetModules()) {
    if (std::find(target_modules.begin(), target_modules.end(), m) != target_modules.end()) {
      spec.target_modules.push_back(m);
    }
  }
  const int64_t q = num_heads * head_dim, kv = num_kv_heads * head_dim;
  auto shape = [&](const std::string& m) -> std::pair<int64_t, int64_t> {
    if (m == "q_proj") return {hidden, q};
    if (m == "k_proj" || m == "v_proj") return {hidden, kv};
    if (m == "o_proj") return {q, hidden};
    if (m == "gate_proj" || m == "up_proj") return {hidden, intermediate};
    return {intermediate, hidden};  // down_proj
  };
  for (int64_t l = 0; l < num_layers; ++l) {
    for (const std::string& m : spec.target_modules) {
      auto [in, out] = shape(m);
      spec.targets.push_back({fmt::format("model.layers.{}.{}.{}", l, ModuleGroup(m), m), in, out});
    }
  }
  return spec;
}

Expected<PackedLora> LoadPeftAdapter(const std::string& name, const std::string& dir,
                                     const LoraSpec& spec) {
  if (spec.max_lora_rank <= 0 || spec.targets.empty()) {
    return InvalidArgumentError("LoRA adapter '{}': the artifact has no LoRA targets", name);
  }
  Problems problems;
  if (!IsDirectory(dir)) {
    problems.Add(
        "not a directory (a PEFT adapter directory has adapter_config.json and "
        "adapter_model.safetensors)");
    return Fail(name, dir, problems);
  }
  AdapterConfig config = ParseAdapterConfig(dir, &problems);

  std::map<std::string, size_t> target_index;
  int64_t num_layers = 0;
  for (size_t t = 0; t < spec.targets.size(); ++t) {
    target_index.emplace(spec.targets[t].name, t);
    if (std::optional<DecoderModule> m = ParseDecoderModule(spec.targets[t].name)) {
      num_layers = std::max(num_layers, m->layer + 1);
    }
  }
  const std::string compiled_modules = fmt::format("{}", fmt::join(spec.target_modules, ","));

  // Sort every tensor of the file into a target's lora_A / lora_B, or a problem.
  std::optional<xcc::SafetensorsFile> file;
  std::vector<TargetTensors> found(spec.targets.size());
  const std::string weights_path = dir + "/" + kWeightsFile;
  if (!IsRegularFile(weights_path)) {
    if (IsRegularFile(dir + "/" + kPickleFile)) {
      problems.Add(
          fmt::format("{} is a pickle checkpoint, which is not read: convert it to "
                      "safetensors ({}, e.g. PEFT's save_pretrained(..., "
                      "safe_serialization=True))",
                      kPickleFile, kWeightsFile));
    } else {
      problems.Add(fmt::format("{} is missing", kWeightsFile));
    }
  } else {
    Expected<xcc::SafetensorsFile> opened = xcc::SafetensorsFile::Open(weights_path);
    if (!opened.ok()) {
      problems.Add(opened.status().message());
    } else {
      file.emplace(std::move(opened).value());
    }
  }
  std::set<std::string> unsupported_modules;
  bool any_lora = false;
  if (file) {
    for (const xcc::SourceTensor& tensor : file->tensors()) {
      const std::string& tname = tensor.name;
      std::string rest = StartsWith(tname, "base_model.model.") ? tname.substr(17) : tname;
      bool is_a = EndsWith(rest, ".lora_A.weight"), is_b = EndsWith(rest, ".lora_B.weight");
      bool is_embedding =
          EndsWith(rest, ".lora_embedding_A") || EndsWith(rest, ".lora_embedding_B");
      if (rest.find("lora_magnitude_vector") != std::string::npos) {
        problems.Add("dora-tensor",
                     fmt::format("tensor '{}' is a DoRA magnitude vector: DoRA is not "
                                 "supported",
                                 tname));
        continue;
      }
      if (EndsWith(rest, ".bias")) {
        problems.Add("bias-tensor",
                     fmt::format("tensor '{}' is a bias: adapter bias is not supported", tname));
        continue;
      }
      if (!is_a && !is_b && !is_embedding) {
        problems.Add("other-tensor",
                     fmt::format("tensor '{}' is not a LoRA weight (expected "
                                 "<module>.lora_A.weight / <module>.lora_B.weight; full weights "
                                 "such as modules_to_save are not supported)",
                                 tname));
        continue;
      }
      const std::string path =
          rest.substr(0, rest.size() - (is_embedding ? std::strlen(".lora_embedding_A")
                                                     : std::strlen(".lora_A.weight")));
      std::optional<DecoderModule> m = is_embedding ? std::nullopt : ParseDecoderModule(path);
      if (!m) {
        std::string kind = ModuleKind(path);
        if (unsupported_modules.insert(path).second) {
          problems.Add("unsupported:" + kind, fmt::format("LoRA on {} ({}) is not supported: {}",
                                                          kind, path, kTargetsOnly));
        }
        continue;
      }
      any_lora = true;
      if (std::find(spec.target_modules.begin(), spec.target_modules.end(), m->short_name) ==
          spec.target_modules.end()) {
        if (unsupported_modules.insert(path).second) {
          problems.Add("module:" + m->short_name,
                       fmt::format("the adapter adapts {} ({}), but the artifact was compiled with "
                                   "--lora-target-modules {}",
                                   m->short_name, path, compiled_modules));
        }
        continue;
      }
      auto it = target_index.find(m->canonical);
      if (it == target_index.end()) {
        if (unsupported_modules.insert(path).second) {
          problems.Add("layer", fmt::format("tensor '{}': layer {} is beyond the model's {} layers",
                                            tname, m->layer, num_layers));
        }
        continue;
      }
      if (!SupportedDType(tensor.dtype)) {
        problems.Add(std::string("dtype:") + xcc::SourceDTypeName(tensor.dtype),
                     fmt::format("tensor '{}': dtype {} is not supported (f32, f16, bf16)", tname,
                                 xcc::SourceDTypeName(tensor.dtype)));
      }
      TargetTensors& tt = found[it->second];
      const xcc::SourceTensor*& slot = is_a ? tt.a : tt.b;
      if (slot != nullptr) {
        problems.Add(fmt::format("tensors '{}' and '{}' are the same LoRA weight of {}", slot->name,
                                 tname, m->canonical));
        continue;
      }
      slot = &tensor;
      tt.path = path;
    }
    if (!any_lora && problems.empty()) {
      problems.Add(fmt::format("{} has no LoRA weights", kWeightsFile));
    }
  }

  // Check every adapted target's pair against the base model, the config and R.
  struct Resolved {
    int64_t r = 0;
    float scaling = 0;
  };
  std::vector<Resolved> resolved(spec.targets.size());
  for (size_t t = 0; t < spec.targets.size(); ++t) {
    const TargetTensors& tt = found[t];
    if (tt.a == nullptr && tt.b == nullptr) continue;
    const LoraTarget& target = spec.targets[t];
    const std::string short_name = ParseDecoderModule(target.name)->short_name;
    if (tt.a == nullptr || tt.b == nullptr) {
      const xcc::SourceTensor* have = tt.a ? tt.a : tt.b;
      problems.Add(std::string("pair:") + (tt.a ? "A" : "B"),
                   fmt::format("tensor '{}' has no matching {} tensor", have->name,
                               tt.a ? "lora_B" : "lora_A"));
      continue;
    }
    bool shapes_ok = true;
    for (const xcc::SourceTensor* w : {tt.a, tt.b}) {
      if (w->shape.size() != 2 || w->shape[0] < 1 || w->shape[1] < 1) {
        problems.Add(fmt::format("tensor '{}' has shape {}: a LoRA weight is 2-D and non-empty",
                                 w->name, ShapeString(w->shape)));
        shapes_ok = false;
      }
    }
    if (!shapes_ok) continue;
    const int64_t rank = tt.a->shape[0];
    if (tt.a->shape[1] != target.in_features) {
      problems.Add(
          fmt::format("shape:A:{}:{}", short_name, ShapeString(tt.a->shape)),
          fmt::format("tensor '{}' has shape {}, expected [{}, {}] ({} has in_features {}): "
                      "the adapter was trained on a different base model",
                      tt.a->name, ShapeString(tt.a->shape), rank, target.in_features, target.name,
                      target.in_features));
      shapes_ok = false;
    }
    if (tt.b->shape[0] != target.out_features) {
      problems.Add(
          fmt::format("shape:B:{}:{}", short_name, ShapeString(tt.b->shape)),
          fmt::format("tensor '{}' has shape {}, expected [{}, {}] ({} has out_features {}): "
                      "the adapter was trained on a different base model",
                      tt.b->name, ShapeString(tt.b->shape), target.out_features, tt.b->shape[1],
                      target.name, target.out_features));
      shapes_ok = false;
    }
    if (tt.b->shape[1] != rank) {
      problems.Add(fmt::format("rank:{}:{}:{}", short_name, rank, tt.b->shape[1]),
                   fmt::format("tensors '{}' and '{}' disagree on the rank ({} rows of lora_A, {} "
                               "columns of lora_B)",
                               tt.a->name, tt.b->name, rank, tt.b->shape[1]));
      shapes_ok = false;
    }
    int64_t r = rank;
    double alpha = 0;
    if (config.usable) {
      ModuleScale s = ResolveModule(config, tt.path);
      if (s.r != rank) {
        problems.Add(fmt::format("config-rank:{}:{}:{}", short_name, s.r, rank),
                     fmt::format("tensor '{}' has rank {}, but {} gives r = {} for {} (from {})",
                                 tt.a->name, rank, kConfigFile, s.r, tt.path, s.r_source));
        shapes_ok = false;
      }
      r = s.r;
      alpha = s.alpha;
    }
    if (r > spec.max_lora_rank) {
      problems.Add(fmt::format("max-rank:{}", r),
                   fmt::format("LoRA rank {} ({}) is greater than max_lora_rank {} (the artifact's "
                               "--max-lora-rank)",
                               r, tt.path, spec.max_lora_rank));
      shapes_ok = false;
    }
    if (!shapes_ok || !config.usable) continue;
    double scaling = config.use_rslora ? alpha / std::sqrt(static_cast<double>(r))
                                       : alpha / static_cast<double>(r);
    resolved[t] = {r, static_cast<float>(scaling)};
  }
  if (!problems.empty()) return Fail(name, dir, problems);

  // Everything checked: convert and lay out.
  PackedLora out;
  out.name = name;
  out.path = dir;
  out.base_model_name_or_path = config.base_model_name_or_path;
  out.a.resize(spec.targets.size());
  out.bt.resize(spec.targets.size());
  const int64_t big_r = spec.max_lora_rank;
  std::set<std::string> modules;
  std::vector<float> b;
  for (size_t t = 0; t < spec.targets.size(); ++t) {
    const TargetTensors& tt = found[t];
    if (tt.a == nullptr) continue;
    const LoraTarget& target = spec.targets[t];
    const int64_t r = resolved[t].r, in = target.in_features, n_out = target.out_features;
    std::vector<float>& a = out.a[t];
    a.assign(static_cast<size_t>(big_r * in), 0.0f);
    Status st = xcc::ConvertToF32(tt.a->dtype, tt.a->data, tt.a->nbytes, r * in, a.data());
    if (st.ok()) {
      b.resize(static_cast<size_t>(n_out * r));
      st = xcc::ConvertToF32(tt.b->dtype, tt.b->data, tt.b->nbytes, n_out * r, b.data());
    }
    if (!st.ok()) return st.WithContext(fmt::format("LoRA adapter '{}' ({})", name, dir));
    std::vector<float>& bt = out.bt[t];
    bt.assign(static_cast<size_t>(big_r * n_out), 0.0f);
    const float scaling = resolved[t].scaling;
    for (int64_t o = 0; o < n_out; ++o) {
      for (int64_t k = 0; k < r; ++k) bt[k * n_out + o] = scaling * b[o * r + k];
    }
    out.rank = std::max(out.rank, r);
    modules.insert(ParseDecoderModule(target.name)->short_name);
  }
  for (const std::string& m : AllLoraTargetModules()) {
    if (modules.count(m)) out.modules.push_back(m);
  }
  return out;
}

int64_t PackedLoraFloats(const LoraSpec& spec) {
  int64_t n = 0;
  for (const LoraTarget& t : spec.targets)
    n += spec.max_lora_rank * (t.in_features + t.out_features);
  return n;
}

void WritePackedLora(const PackedLora& lora, const LoraSpec& spec, float* out) {
  const int64_t big_r = spec.max_lora_rank;
  for (size_t t = 0; t < spec.targets.size(); ++t) {
    const LoraTarget& target = spec.targets[t];
    const struct {
      const std::vector<std::vector<float>>& src;
      int64_t n;
    } parts[] = {{lora.a, big_r * target.in_features}, {lora.bt, big_r * target.out_features}};
    for (const auto& part : parts) {
      if (t < part.src.size() && !part.src[t].empty()) {
        assert(static_cast<int64_t>(part.src[t].size()) == part.n);
        std::memcpy(out, part.src[t].data(), static_cast<size_t>(part.n) * sizeof(float));
      } else {
        std::fill(out, out + part.n, 0.0f);
      }
      out += part.n;
    }
  }
}

Expected<PackedLoraView> PackedLoraView::Make(const float* data, int64_t n_floats,
                                              const LoraSpec& spec) {
  const int64_t want = PackedLoraFloats(spec);
  if (n_floats != want) {
    return InvalidArgumentError(
        "packed LoRA adapter has {} floats, but the artifact's LoRA targets need {}", n_floats,
        want);
  }
  PackedLoraView view;
  view.data_ = data;
  view.rank_ = spec.max_lora_rank;
  int64_t offset = 0;
  for (const LoraTarget& t : spec.targets) {
    view.a_offsets_.push_back(offset);
    view.in_features_.push_back(t.in_features);
    offset += spec.max_lora_rank * (t.in_features + t.out_features);
  }
  return view;
}

Expected<std::vector<std::pair<std::string, std::string>>> ParseLoraModules(
    const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> names;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
      return InvalidArgumentError("'{}' is not name=path (e.g. sql=/adapters/sql-lora)", arg);
    std::string name = arg.substr(0, eq);
    if (!names.insert(name).second)
      return InvalidArgumentError("adapter name '{}' is given twice", name);
    out.emplace_back(std::move(name), arg.substr(eq + 1));
  }
  return out;
}

}  // namespace xrt
