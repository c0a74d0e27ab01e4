#include "compiler/frontend/hf_config.h"

#include <sys/stat.h>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace xcc {
namespace {

using json = nlohmann::json;

const char* const kSupportedArchitectures[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                               "Qwen2ForCausalLM"};

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

const char* JsonTypeName(const json& j) { return j.type_name(); }

// Typed access to the fields of one JSON object, with errors that name the
// file and the field.
class Fields {
 public:
  Fields(const json& obj, std::string file, std::string prefix = "")
      : obj_(obj), file_(std::move(file)), prefix_(std::move(prefix)) {}

  // Absent or null.
  bool Absent(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null();
  }
  const json* Find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  Status Missing(const char* key) const {
    return xrt::NotFoundError("{}: field '{}{}': missing", file_, prefix_, key);
  }
  Status WrongType(const char* key, const char* want) const {
    return xrt::InvalidArgumentError("{}: field '{}{}': expected {}, got {}", file_, prefix_, key,
                                     want, JsonTypeName(obj_.at(key)));
  }
  Status Invalid(const char* key, const std::string& why) const {
    return xrt::InvalidArgumentError("{}: field '{}{}': {}", file_, prefix_, key, why);
  }

  Expected<int64_t> Int(const char* key) const {
    const json* v = Find(key);
    if (!v) return Missing(key);
    if (!v->is_number_integer()) {
      // Accept integral floats such as 4096.0.
      if (v->is_number_float()) {
        double d = v->get<double>();
        if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
      }
      return WrongType(key, "an integer");
    }
    return v->get<int64_t>();
  }
  Expected<int64_t> PositiveInt(const char* key) const {
    XRT_ASSIGN_OR_RETURN(int64_t v, Int(key));
    if (v <= 0) return Invalid(key, fmt::format("must be positive, got {}", v));
    return v;
  }
  Expected<int64_t> IntOr(const char* key, int64_t def) const {
    if (Absent(key)) return def;
    return Int(key);
  }
  Expected<double> Number(const char* key) const {
    const json* v = Find(key);
    if (!v) return Missing(key);
    if (!v->is_number()) return WrongType(key, "a number");
    return v->get<double>();
  }
  Expected<double> NumberOr(const char* key, double def) const {
    if (Absent(key)) return def;
    return Number(key);
  }
  Expected<bool> BoolOr(const char* key, bool def) const {
    const json* v = Find(key);
    if (!v) return def;
    if (!v->is_boolean()) return WrongType(key, "a bool");
    return v->get<bool>();
  }
  Expected<std::string> StringOr(const char* key, const std::string& def) const {
    const json* v = Find(key);
    if (!v) return def;
    if (!v->is_string()) return WrongType(key, "a string");
    return v->get<std::string>();
  }
  // An int or a list of ints (eos_token_id); absent -> empty.
  Expected<std::vector<int32_t>> IdList(const char* key) const {
    std::vector<int32_t> out;
    const json* v = Find(key);
    if (!v) return out;
    auto one = [&](const json& e) -> Status {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
          e.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Invalid(key,
                       fmt::format("expected a token id or a list of them, got {}", v->dump()));
      }
      out.push_back(static_cast<int32_t>(e.get<int64_t>()));
      return Status::Ok();
    };
    if (v->is_array()) {
      for (const json& e : *v) XRT_RETURN_IF_ERROR(one(e));
    } else {
      XRT_RETURN_IF_ERROR(one(*v));
    }
    return out;
  }

 private:
  const json& obj_;
  std::string file_;
  std::string prefix_;
};

Expected<json> ParseJsonObject(const std::string& text, const std::string& file) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return xrt::DataLossError("{}: not valid JSON", file);
  if (!j.is_object())
    return xrt::DataLossError("{}: expected a JSON object, got {}", file, j.type_name());
  return j;
}

Status ParseRopeScaling(const Fields& top, const json& config, const std::string& file,
                        const std::string& prefix, DecoderConfig* c) {
  // transformers >= 5 writes `rope_parameters` (rope_theta + rope_type + scaling
  // fields) instead of `rope_theta` / `rope_scaling`.
  const char* key = top.Find("rope_scaling") ? "rope_scaling" : "rope_parameters";
  const json* rs = top.Find(key);
  if (!rs) return Status::Ok();
  if (!rs->is_object()) return top.WrongType(key, "an object or null");
  Fields f(*rs, file, prefix + key + ".");
  if (!f.Absent("rope_theta")) {
    XRT_ASSIGN_OR_RETURN(c->rope_theta, f.Number("rope_theta"));
    if (!(c->rope_theta > 0)) return f.Invalid("rope_theta", "must be positive");
  }
  const char* type_key = f.Absent("rope_type") ? "type" : "rope_type";
  XRT_ASSIGN_OR_RETURN(std::string type, f.StringOr(type_key, ""));
  if (type.empty()) return f.Missing("rope_type");
  if (type == "default") return Status::Ok();
  if (type == "linear") {
    c->rope_scaling.type = "linear";
    XRT_ASSIGN_OR_RETURN(c->rope_scaling.factor, f.Number("factor"));
  } else if (type == "llama3") {
    c->rope_scaling.type = "llama3";
    XRT_ASSIGN_OR_RETURN(c->rope_scaling.factor, f.Number("factor"));
    XRT_ASSIGN_OR_RETURN(c->rope_scaling.low_freq_factor, f.Number("low_freq_factor"));
    XRT_ASSIGN_OR_RETURN(c->rope_scaling.high_freq_factor, f.Number("high_freq_factor"));
    XRT_ASSIGN_OR_RETURN(c->rope_scaling.original_max_position_embeddings,
                         f.PositiveInt("original_max_position_embeddings"));
    if (!(c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor)) {
      return f.Invalid("high_freq_factor", fmt::format("must exceed low_freq_factor ({} <= {})",
                                                       c->rope_scaling.high_freq_factor,
                                                       c->rope_scaling.low_freq_factor));
    }
  } else {
    return xrt::UnimplementedError(
        "{}: field '{}{}.{}': unsupported value '{}' (supported: linear, llama3, default)", file,
        prefix, key, type_key, type);
  }
  if (!(c->rope_scaling.factor > 0)) {
    return f.Invalid("factor", fmt::format("must be positive, got {}", c->rope_scaling.factor));
  }
  return Status::Ok();
}

}  // namespace

Expected<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return xrt::NotFoundError("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return xrt::DataLossError("{}: read error", path);
  return ss.str();
}

Expected<HfConfig> LoadHfConfig(const std::string& path) {
  XRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseHfConfig(text, path);
}

namespace {

// The decoder fields of config object `j` (the whole config.json, or a LLaVA
// config's text_config, then `prefix` is "text_config.").
Expected<HfConfig> ParseDecoderObject(const json& j, const std::string& file,
                                      const std::string& prefix) {
  Fields f(j, file, prefix);
  HfConfig out;
  DecoderConfig& c = out.decoder;

  const json* archs = f.Find("architectures");
  if (!archs) return f.Missing("architectures");
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return f.Invalid("architectures", "expected a non-empty list of strings");
  }
  c.architecture = (*archs)[0].get<std::string>();
  bool supported = false;
  for (const char* a : kSupportedArchitectures) supported |= c.architecture == a;
  if (!supported) {
    return xrt::UnimplementedError(
        "{}: field '{}architectures': unsupported architecture '{}' (supported: {})", file, prefix,
        c.architecture,
        fmt::join(std::begin(kSupportedArchitectures), std::end(kSupportedArchitectures), ", "));
  }
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";

  XRT_ASSIGN_OR_RETURN(c.vocab_size, f.PositiveInt("vocab_size"));
  XRT_ASSIGN_OR_RETURN(c.hidden_size, f.PositiveInt("hidden_size"));
  XRT_ASSIGN_OR_RETURN(c.intermediate_size, f.PositiveInt("intermediate_size"));
  XRT_ASSIGN_OR_RETURN(c.num_hidden_layers, f.PositiveInt("num_hidden_layers"));
  XRT_ASSIGN_OR_RETURN(c.num_attention_heads, f.PositiveInt("num_attention_heads"));
  if (f.Absent("num_key_value_heads")) {
    c.num_key_value_heads = c.num_attention_heads;
  } else {
    XRT_ASSIGN_OR_RETURN(c.num_key_value_heads, f.PositiveInt("num_key_value_heads"));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return f.Invalid("num_key_value_heads",
                     fmt::format("{} does not divide num_attention_heads {}", c.num_key_value_heads,
                                 c.num_attention_heads));
  }
  if (f.Absent("head_dim")) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return f.Invalid("num_attention_heads",
                       fmt::format("{} does not divide hidden_size {} (and no head_dim given)",
                                   c.num_attention_heads, c.hidden_size));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  } else {
    XRT_ASSIGN_OR_RETURN(c.head_dim, f.PositiveInt("head_dim"));
  }
  if (c.head_dim % 2 != 0) {
    return f.Invalid("head_dim",
                     fmt::format("must be even for rotary embeddings, got {}", c.head_dim));
  }
  XRT_ASSIGN_OR_RETURN(c.max_position_embeddings, f.PositiveInt("max_position_embeddings"));
  XRT_ASSIGN_OR_RETURN(c.rms_norm_eps, f.NumberOr("rms_norm_eps", 1e-6));
  if (!(c.rms_norm_eps > 0)) return f.Invalid("rms_norm_eps", "must be positive");
  XRT_ASSIGN_OR_RETURN(c.rope_theta, f.NumberOr("rope_theta", 10000.0));
  if (!(c.rope_theta > 0)) return f.Invalid("rope_theta", "must be positive");
  XRT_RETURN_IF_ERROR(ParseRopeScaling(f, j, file, prefix, &c));
  XRT_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.BoolOr("tie_word_embeddings", false));
  // As transformers builds the attention projections: Qwen2 has q/k/v biases
  // and none on o_proj; Llama's attention_bias gives all four a bias; Mistral
  // has none whatever the config says.
  if (qwen2) {
    c.attention_bias = true;
  } else if (c.architecture == "LlamaForCausalLM") {
    XRT_ASSIGN_OR_RETURN(c.attention_bias, f.BoolOr("attention_bias", false));
    c.attention_output_bias = c.attention_bias;
  }
  XRT_ASSIGN_OR_RETURN(bool mlp_bias, f.BoolOr("mlp_bias", false));
  if (mlp_bias) {
    return xrt::UnimplementedError("{}: field '{}mlp_bias': true is not supported", file, prefix);
  }
  XRT_ASSIGN_OR_RETURN(c.hidden_act, f.StringOr("hidden_act", "silu"));
  if (c.hidden_act != "silu") {
    return xrt::UnimplementedError(
        "{}: field '{}hidden_act': unsupported value '{}' (supported: silu)", file, prefix,
        c.hidden_act);
  }
  bool use_sliding = true;
  if (qwen2) {
    XRT_ASSIGN_OR_RETURN(use_sliding, f.BoolOr("use_sliding_window", false));
  }
  if (use_sliding && c.architecture != "LlamaForCausalLM") {
    XRT_ASSIGN_OR_RETURN(c.sliding_window, f.IntOr("sliding_window", 0));
    if (c.sliding_window < 0) return f.Invalid("sliding_window", "must not be negative");
  }
  XRT_ASSIGN_OR_RETURN(out.eos_token_ids, f.IdList("eos_token_id"));
  return out;
}

// Field defaults of the transformers config classes a LLaVA's sub-configs are
// saved as differences from (configuration_*.py, transformers 4.4x-5.x).
json DecoderDefaults(const std::string& model_type) {
  if (model_type == "qwen2")
    return {{"architectures", {"Qwen2ForCausalLM"}},
            {"vocab_size", 151936},
            {"hidden_size", 4096},
            {"intermediate_size", 22016},
            {"num_hidden_layers", 32},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 32},
            {"max_position_embeddings", 32768},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0}};
  if (model_type == "mistral")
    return {{"architectures", {"MistralForCausalLM"}},
            {"vocab_size", 32000},
            {"hidden_size", 4096},
            {"intermediate_size", 14336},
            {"num_hidden_layers", 32},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 8},
            {"max_position_embeddings", 4096 * 32},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0},
            {"sliding_window", 4096}};
  if (model_type == "llama")
    return {{"architectures", {"LlamaForCausalLM"}},
            {"vocab_size", 32000},
            {"hidden_size", 4096},
            {"intermediate_size", 11008},
            {"num_hidden_layers", 32},
            {"num_attention_heads", 32},
            {"max_position_embeddings", 2048},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0}};
  return nullptr;
}

json VisionDefaults(const std::string& model_type) {
  if (model_type == "clip_vision_model")
    return {{"hidden_size", 768},        {"intermediate_size", 3072},  {"num_hidden_layers", 12},
            {"num_attention_heads", 12}, {"num_channels", 3},          {"image_size", 224},
            {"patch_size", 32},          {"hidden_act", "quick_gelu"}, {"layer_norm_eps", 1e-5}};
  if (model_type == "siglip_vision_model")
    return {{"hidden_size", 768},      {"intermediate_size", 3072},
            {"num_hidden_layers", 12}, {"num_attention_heads", 12},
            {"num_channels", 3},       {"image_size", 224},
            {"patch_size", 16},        {"hidden_act", "gelu_pytorch_tanh"},
            {"layer_norm_eps", 1e-6}};
  return nullptr;
}

// `obj` with every absent (or null) key of `defaults` filled in.
json WithDefaults(const json& obj, const json& defaults) {
  json out = obj;
  for (auto it = defaults.begin(); it != defaults.end(); ++it)
    if (!out.contains(it.key()) || out[it.key()].is_null()) out[it.key()] = it.value();
  return out;
}

Expected<HfConfig> ParseLlava(const json& j, const std::string& file) {
  Fields f(j, file);
  // A sub-config: absent means the LlavaConfig default (Llama / CLIP-L/14-336).
  auto sub = [&](const char* key, const json& fallback) -> Expected<json> {
    const json* v = f.Find(key);
    if (!v) return fallback;
    if (!v->is_object()) return f.WrongType(key, "an object");
    return *v;
  };
  XRT_ASSIGN_OR_RETURN(json text, sub("text_config", json{{"model_type", "llama"}}));
  Fields tf(text, file, "text_config.");
  XRT_ASSIGN_OR_RETURN(std::string text_type, tf.StringOr("model_type", "llama"));
  json text_defaults = DecoderDefaults(text_type);
  if (text_defaults.is_null())
    return xrt::UnimplementedError(
        "{}: field 'text_config.model_type': unsupported decoder '{}' (supported: llama, "
        "mistral, qwen2)",
        file, text_type);
  // The top-level vocab_size some LLaVA configs carry wins over the class default.
  if (!f.Absent("vocab_size") && tf.Absent("vocab_size"))
    text_defaults["vocab_size"] = j["vocab_size"];
  XRT_ASSIGN_OR_RETURN(HfConfig out,
                       ParseDecoderObject(WithDefaults(text, text_defaults), file, "text_config."));
  if (out.eos_token_ids.empty()) {
    XRT_ASSIGN_OR_RETURN(out.eos_token_ids, f.IdList("eos_token_id"));
  }

  XRT_ASSIGN_OR_RETURN(json vision_obj,
                       sub("vision_config", json{{"model_type", "clip_vision_model"},
                                                 {"hidden_size", 1024},
                                                 {"intermediate_size", 4096},
                                                 {"num_hidden_layers", 24},
                                                 {"num_attention_heads", 16},
                                                 {"image_size", 336},
                                                 {"patch_size", 14}}));
  Fields vt(vision_obj, file, "vision_config.");
  XRT_ASSIGN_OR_RETURN(std::string vision_type, vt.StringOr("model_type", "clip_vision_model"));
  json vision_defaults = VisionDefaults(vision_type);
  if (vision_defaults.is_null())
    return xrt::UnimplementedError(
        "{}: field 'vision_config.model_type': unsupported vision tower '{}' (supported: "
        "clip_vision_model, siglip_vision_model)",
        file, vision_type);
  const json vision_json = WithDefaults(vision_obj, vision_defaults);
  Fields vf(vision_json, file, "vision_config.");
  VisionConfig v;
  v.tower = vision_type == "clip_vision_model" ? "clip" : "siglip";
  XRT_ASSIGN_OR_RETURN(v.hidden_size, vf.PositiveInt("hidden_size"));
  XRT_ASSIGN_OR_RETURN(v.intermediate_size, vf.PositiveInt("intermediate_size"));
  XRT_ASSIGN_OR_RETURN(v.num_hidden_layers, vf.PositiveInt("num_hidden_layers"));
  XRT_ASSIGN_OR_RETURN(v.num_attention_heads, vf.PositiveInt("num_attention_heads"));
  XRT_ASSIGN_OR_RETURN(v.num_channels, vf.PositiveInt("num_channels"));
  XRT_ASSIGN_OR_RETURN(v.image_size, vf.PositiveInt("image_size"));
  XRT_ASSIGN_OR_RETURN(v.patch_size, vf.PositiveInt("patch_size"));
  XRT_ASSIGN_OR_RETURN(v.layer_norm_eps, vf.Number("layer_norm_eps"));
  XRT_ASSIGN_OR_RETURN(v.hidden_act, vf.StringOr("hidden_act", ""));
  if (!(v.layer_norm_eps > 0)) return vf.Invalid("layer_norm_eps", "must be positive");
  if (v.image_size % v.patch_size != 0)
    return vf.Invalid("patch_size",
                      fmt::format("{} does not divide image_size {}", v.patch_size, v.image_size));
  if (v.hidden_size % v.num_attention_heads != 0)
    return vf.Invalid("num_attention_heads", fmt::format("{} does not divide hidden_size {}",
                                                         v.num_attention_heads, v.hidden_size));
  if (GeluApproximation(v.hidden_act).empty())
    return xrt::UnimplementedError(
        "{}: field 'vision_config.hidden_act': unsupported value '{}' (supported: quick_gelu, "
        "gelu, gelu_pytorch_tanh, gelu_new)",
        file, v.hidden_act);

  // Unsupported LLaVA variants, named by the field that asks for them.
  for (const char* key : {"image_grid_pinpoints", "mm_patch_merge_type"})
    if (!f.Absent(key))
      return xrt::UnimplementedError(
          "{}: field '{}': image tiling (LLaVA-NeXT \"anyres\") is not supported", file, key);
  XRT_ASSIGN_OR_RETURN(std::string projector_type, f.StringOr("projector_type", "mlp"));
  if (projector_type != "mlp" && projector_type != "mlp2x_gelu")
    return xrt::UnimplementedError(
        "{}: field 'projector_type': unsupported value '{}' (supported: a 2-layer mlp)", file,
        projector_type);

  const json* layer = f.Find("vision_feature_layer");
  std::vector<int64_t> layers;
  if (!layer) {
    layers.push_back(-2);
  } else if (layer->is_number_integer()) {
    layers.push_back(layer->get<int64_t>());
  } else if (layer->is_array() && !layer->empty()) {
    for (const json& e : *layer) {
      if (!e.is_number_integer())
        return f.Invalid("vision_feature_layer",
                         fmt::format("expected an int or a list of ints, got {}", layer->dump()));
      layers.push_back(e.get<int64_t>());
    }
  } else {
    return f.Invalid(
        "vision_feature_layer",
        fmt::format("expected an int or a non-empty list of ints, got {}", layer->dump()));
  }
  for (int64_t l : layers) {
    // hidden_states has num_hidden_layers + 1 entries; python indexing.
    const int64_t index = l < 0 ? v.num_hidden_layers + 1 + l : l;
    if (index < 0 || index > v.num_hidden_layers)
      return f.Invalid("vision_feature_layer",
                       fmt::format("layer {} is out of range for a tower of {} layers "
                                   "({} hidden states)",
                                   l, v.num_hidden_layers, v.num_hidden_layers + 1));
    v.feature_layers.push_back(index);
  }
  XRT_ASSIGN_OR_RETURN(v.select_strategy, f.StringOr("vision_feature_select_strategy", "default"));
  if (v.select_strategy != "default" && v.select_strategy != "full")
    return xrt::UnimplementedError(
        "{}: field 'vision_feature_select_strategy': unsupported value '{}' (supported: "
        "default, full)",
        file, v.select_strategy);
  XRT_ASSIGN_OR_RETURN(v.projector_act, f.StringOr("projector_hidden_act", "gelu"));
  if (GeluApproximation(v.projector_act).empty())
    return xrt::UnimplementedError(
        "{}: field 'projector_hidden_act': unsupported value '{}' (supported: gelu, "
        "gelu_pytorch_tanh, gelu_new, quick_gelu)",
        file, v.projector_act);
  XRT_ASSIGN_OR_RETURN(v.projector_bias, f.BoolOr("multimodal_projector_bias", true));
  const char* token_key = f.Absent("image_token_index") ? "image_token_id" : "image_token_index";
  XRT_ASSIGN_OR_RETURN(int64_t token, f.IntOr(token_key, 32000));
  if (token < 0 || token >= out.decoder.vocab_size)
    return f.Invalid(token_key, fmt::format("{} is outside the vocabulary [0, {})", token,
                                            out.decoder.vocab_size));
  v.image_token_id = static_cast<int32_t>(token);
  out.vision = std::move(v);
  return out;
}

}  // namespace

Expected<HfConfig> ParseHfConfig(const std::string& json_text, const std::string& file) {
  XRT_ASSIGN_OR_RETURN(json j, ParseJsonObject(json_text, file));
  const json* archs = Fields(j, file).Find("architectures");
  if (archs && archs->is_array() && !archs->empty() && (*archs)[0].is_string() &&
      (*archs)[0].get<std::string>() == "LlavaForConditionalGeneration")
    return ParseLlava(j, file);
  return ParseDecoderObject(j, file, "");
}

Expected<GenerationDefaults> LoadGenerationConfig(const std::string& path) {
  XRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseGenerationConfig(text, path);
}

Expected<GenerationDefaults> ParseGenerationConfig(const std::string& json_text,
                                                   const std::string& file) {
  XRT_ASSIGN_OR_RETURN(json j, ParseJsonObject(json_text, file));
  Fields f(j, file);
  GenerationDefaults g;
  XRT_ASSIGN_OR_RETURN(g.eos_token_ids, f.IdList("eos_token_id"));
  XRT_ASSIGN_OR_RETURN(g.temperature, f.NumberOr("temperature", -1));
  XRT_ASSIGN_OR_RETURN(g.top_p, f.NumberOr("top_p", -1));
  XRT_ASSIGN_OR_RETURN(g.top_k, f.IntOr("top_k", -1));
  XRT_ASSIGN_OR_RETURN(g.repetition_penalty, f.NumberOr("repetition_penalty", -1));
  return g;
}

Expected<std::string> LoadHfChatTemplate(const std::string& dir,
                                         std::vector<std::string>* files_read) {
  auto note = [&](const std::string& p) {
    if (files_read) files_read->push_back(p);
  };
  const std::string jinja = dir + "/chat_template.jinja";
  if (FileExists(jinja)) {
    note(jinja);
    return ReadTextFile(jinja);
  }
  auto from_object = [&](const json& obj, const std::string& file,
                         bool required) -> Expected<std::string> {
    auto it = obj.find("chat_template");
    if (it == obj.end() || it->is_null()) {
      if (required) return xrt::NotFoundError("{}: field 'chat_template': missing", file);
      return std::string();
    }
    if (it->is_string()) return it->get<std::string>();
    if (it->is_array()) {
      for (const json& e : *it) {
        if (!e.is_object()) continue;
        auto name = e.find("name");
        auto tmpl = e.find("template");
        if (name != e.end() && name->is_string() && name->get<std::string>() == "default" &&
            tmpl != e.end() && tmpl->is_string()) {
          return tmpl->get<std::string>();
        }
      }
      return xrt::NotFoundError(
          "{}: field 'chat_template': list has no {{\"name\": \"default\", \"template\": ...}} "
          "entry",
          file);
    }
    return xrt::InvalidArgumentError(
        "{}: field 'chat_template': expected a string or a list of {{name, template}}, got {}",
        file, it->type_name());
  };
  const std::string tj = dir + "/chat_template.json";
  if (FileExists(tj)) {
    note(tj);
    XRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(tj));
    XRT_ASSIGN_OR_RETURN(json j, ParseJsonObject(text, tj));
    return from_object(j, tj, /*required=*/true);
  }
  const std::string tc = dir + "/tokenizer_config.json";
  if (FileExists(tc)) {
    note(tc);
    XRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(tc));
    XRT_ASSIGN_OR_RETURN(json j, ParseJsonObject(text, tc));
    return from_object(j, tc, /*required=*/false);
  }
  return std::string();
}

// transformers' activation name -> xg.gelu's `approximate`, or "" if unsupported.
std::string GeluApproximation(const std::string& act) {
  if (act == "gelu") return "none";
  if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") return "tanh";
  if (act == "quick_gelu") return "quick";
  return "";
}

}  // namespace xcc
