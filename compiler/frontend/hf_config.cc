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
                        DecoderConfig* c) {
  // transformers >= 5 writes `rope_parameters` (rope_theta + rope_type + scaling
  // fields) instead of `rope_theta` / `rope_scaling`.
  const char* key = top.Find("rope_scaling") ? "rope_scaling" : "rope_parameters";
  const json* rs = top.Find(key);
  if (!rs) return Status::Ok();
  if (!rs->is_object()) return top.WrongType(key, "an object or null");
  Fields f(*rs, file, std::string(key) + ".");
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
        "{}: field '{}.{}': unsupported value '{}' (supported: linear, llama3, default)", file, key,
        type_key, type);
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

Expected<HfConfig> ParseHfConfig(const std::string& json_text, const std::string& file) {
  XRT_ASSIGN_OR_RETURN(json j, ParseJsonObject(json_text, file));
  Fields f(j, file);
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
        "{}: field 'architectures': unsupported architecture '{}' (supported: {})", file,
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
  XRT_RETURN_IF_ERROR(ParseRopeScaling(f, j, file, &c));
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
    return xrt::UnimplementedError("{}: field 'mlp_bias': true is not supported", file);
  }
  XRT_ASSIGN_OR_RETURN(c.hidden_act, f.StringOr("hidden_act", "silu"));
  if (c.hidden_act != "silu") {
    return xrt::UnimplementedError(
        "{}: field 'hidden_act': unsupported value '{}' (supported: silu)", file, c.hidden_act);
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

}  // namespace xcc
