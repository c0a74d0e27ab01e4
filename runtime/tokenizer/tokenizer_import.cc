#include "runtime/tokenizer/tokenizer_import.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "runtime/base/json_parse.h"
#include "runtime/base/mapped_file.h"
#include "runtime/tokenizer/utf8.h"

namespace xrt {
namespace {

using json = nlohmann::json;

// The vocabulary table is sized by the largest token id, so ids are bounded well below
// INT32_MAX: 2^22 ids is 16 times the largest vocabularies in use (~256K), and a corrupt
// id can no longer make the import allocate tens of gigabytes.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

// Errors of one JSON file: "<file>: field '<path>': <message>".
class JsonFile {
 public:
  explicit JsonFile(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  template <typename... Args>
  Status Unsupported(const std::string& path, fmt::format_string<Args...> f, Args&&... args) const {
    return Status(StatusCode::kUnimplemented, fmt::format("{}: field '{}': ", name_, path) +
                                                  fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  Status Invalid(const std::string& path, fmt::format_string<Args...> f, Args&&... args) const {
    return Status(StatusCode::kDataLoss, fmt::format("{}: field '{}': ", name_, path) +
                                             fmt::format(f, std::forward<Args>(args)...));
  }

  // j[key] as a string / bool / int, with a typed error if present but wrong.
  Expected<std::optional<std::string>> OptString(const json& j, const std::string& path,
                                                 const char* key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::optional<std::string>();
    if (!it->is_string()) return Invalid(Join(path, key), "expected a string");
    return std::optional<std::string>(it->get<std::string>());
  }
  Expected<bool> OptBool(const json& j, const std::string& path, const char* key,
                         bool default_value) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return default_value;
    if (!it->is_boolean()) return Invalid(Join(path, key), "expected true or false");
    return it->get<bool>();
  }
  Expected<int64_t> Int(const json& j, const std::string& path, const char* key) const {
    auto it = j.find(key);
    if (it == j.end()) return Invalid(Join(path, key), "missing");
    if (!it->is_number_integer()) return Invalid(Join(path, key), "expected an integer");
    return it->get<int64_t>();
  }

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string Index(const std::string& path, size_t i) {
    return fmt::format("{}[{}]", path, i);
  }

 private:
  std::string name_;
};

Expected<json> ReadJson(const std::string& path) {
  XRT_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  const char* begin = reinterpret_cast<const char*>(file.data());
  bool too_deep = false;
  json j = ParseJsonBounded<json>(std::string_view(begin, file.size()), &too_deep);
  if (too_deep) return DataLossError("{}: nests more than {} levels deep", path, kMaxJsonDepth);
  if (j.is_discarded()) return DataLossError("{}: not valid JSON", path);
  if (!j.is_object()) return DataLossError("{}: expected a JSON object at the top level", path);
  return j;
}

// The type of a component object ({"type": "..."}), or an error.
Expected<std::string> TypeOf(const JsonFile& f, const json& j, const std::string& path) {
  if (!j.is_object()) return f.Invalid(path, "expected an object");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string())
    return f.Invalid(path + ".type", "missing or not a string");
  return it->get<std::string>();
}

// Escapes a literal for use in a PCRE2 pattern.
std::string RegexEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Status ParseModel(const JsonFile& f, const json& root, TokenizerSpec* spec,
                  std::unordered_map<std::string, int32_t>* vocab_ids) {
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object()) return f.Invalid("model", "missing or not an object");
  const json& model = *mit;
  std::string type = "BPE";
  if (auto t = model.find("type"); t != model.end()) {
    if (!t->is_string()) return f.Invalid("model.type", "expected a string");
    type = t->get<std::string>();
  } else if (!model.contains("merges")) {
    return f.Invalid("model.type", "missing");
  }
  if (type != "BPE") return f.Unsupported("model.type", "unsupported '{}'", type);
  XRT_ASSIGN_OR_RETURN(spec->byte_fallback, f.OptBool(model, "model", "byte_fallback", false));
  XRT_ASSIGN_OR_RETURN(spec->fuse_unk, f.OptBool(model, "model", "fuse_unk", false));
  if (auto d = model.find("dropout"); d != model.end() && !d->is_null()) {
    if (!d->is_number()) return f.Invalid("model.dropout", "expected a number or null");
    if (d->get<double>() != 0.0)
      return f.Unsupported("model.dropout", "unsupported {}", d->get<double>());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    XRT_ASSIGN_OR_RETURN(std::optional<std::string> affix, f.OptString(model, "model", key));
    if (affix && !affix->empty()) {
      return f.Unsupported(JsonFile::Join("model", key), "unsupported '{}'", *affix);
    }
  }
  XRT_ASSIGN_OR_RETURN(spec->ignore_merges, f.OptBool(model, "model", "ignore_merges", false));

  auto vit = model.find("vocab");
  if (vit == model.end() || !vit->is_object()) {
    return f.Invalid("model.vocab", "missing or not an object");
  }
  std::map<int64_t, std::string> by_id;
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX) {
      return f.Invalid("model.vocab", "token '{}': id is not a non-negative 32-bit integer",
                       it.key());
    }
    const int64_t id = it.value().get<int64_t>();
    if (id > kMaxTokenId) {
      return f.Invalid("model.vocab",
                       "token '{}': id {} is above the largest supported token id {}", it.key(), id,
                       kMaxTokenId);
    }
    auto [slot, inserted] = by_id.emplace(id, it.key());
    if (!inserted) {
      return f.Invalid("model.vocab", "id {} used by both '{}' and '{}'", id, slot->second,
                       it.key());
    }
    (*vocab_ids)[it.key()] = static_cast<int32_t>(id);
  }
  if (!by_id.empty()) spec->vocab.resize(by_id.rbegin()->first + 1);
  for (auto& [id, token] : by_id) spec->vocab[id] = std::move(token);

  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return f.Invalid("model.merges", "missing or not an array");
  }
  spec->merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string path = JsonFile::Index("model.merges", i);
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return f.Invalid(path, "'{}' is not two tokens separated by one space", s);
      }
      spec->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return f.Invalid(path, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }

  XRT_ASSIGN_OR_RETURN(std::optional<std::string> unk, f.OptString(model, "model", "unk_token"));
  if (unk) {
    auto it = vocab_ids->find(*unk);
    if (it == vocab_ids->end())
      return f.Invalid("model.unk_token", "'{}' is not in model.vocab", *unk);
    spec->unk_id = it->second;
  }
  return Status::Ok();
}

Status ParseAddedTokens(const JsonFile& f, const json& root, TokenizerSpec* spec) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return f.Invalid("added_tokens", "expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string path = JsonFile::Index("added_tokens", i);
    if (!t.is_object()) return f.Invalid(path, "expected an object");
    AddedToken token;
    XRT_ASSIGN_OR_RETURN(int64_t id, f.Int(t, path, "id"));
    if (id < 0) return f.Invalid(path + ".id", "{} out of range", id);
    if (id > kMaxTokenId) {
      return f.Invalid(path + ".id", "{} is above the largest supported token id {}", id,
                       kMaxTokenId);
    }
    token.id = static_cast<int32_t>(id);
    XRT_ASSIGN_OR_RETURN(std::optional<std::string> content, f.OptString(t, path, "content"));
    if (!content || content->empty()) return f.Invalid(path + ".content", "missing or empty");
    token.content = std::move(*content);
    XRT_ASSIGN_OR_RETURN(token.special, f.OptBool(t, path, "special", false));
    XRT_ASSIGN_OR_RETURN(token.lstrip, f.OptBool(t, path, "lstrip", false));
    XRT_ASSIGN_OR_RETURN(token.rstrip, f.OptBool(t, path, "rstrip", false));
    XRT_ASSIGN_OR_RETURN(token.single_word, f.OptBool(t, path, "single_word", false));
    XRT_ASSIGN_OR_RETURN(token.normalized, f.OptBool(t, path, "normalized", !token.special));
    if (static_cast<size_t>(token.id) >= spec->vocab.size()) spec->vocab.resize(token.id + 1);
    spec->added_tokens.push_back(std::move(token));
  }
  return Status::Ok();
}

// A Replace normalizer or decoder: {"pattern": {"String": ...}, "content": ...}.
struct ReplaceStep {
  std::string pattern, content;
};
Expected<ReplaceStep> ParseReplace(const JsonFile& f, const json& j, const std::string& path) {
  auto pattern = j.find("pattern");
  if (pattern == j.end() || !pattern->is_object()) {
    return f.Invalid(path + ".pattern", "expected {{\"String\": ...}}");
  }
  auto str = pattern->find("String");
  if (str == pattern->end() || !str->is_string()) {
    if (pattern->contains("Regex")) {
      return f.Unsupported(path + ".pattern", "Regex (only String patterns are supported)");
    }
    return f.Invalid(path + ".pattern", "expected {{\"String\": ...}}");
  }
  ReplaceStep r;
  r.pattern = str->get<std::string>();
  if (r.pattern.empty()) return f.Invalid(path + ".pattern.String", "empty");
  XRT_ASSIGN_OR_RETURN(std::optional<std::string> content, f.OptString(j, path, "content"));
  if (!content) return f.Invalid(path + ".content", "missing");
  r.content = std::move(*content);
  return r;
}

// One character of a component (Metaspace replacement, Strip content).
Expected<std::string> OneChar(const JsonFile& f, const json& j, const std::string& path,
                              const char* key) {
  XRT_ASSIGN_OR_RETURN(std::optional<std::string> s, f.OptString(j, path, key));
  if (!s || !utf8::IsOneCharacter(*s)) {
    return f.Invalid(JsonFile::Join(path, key), "expected a string of one character");
  }
  return *s;
}

// Metaspace's prepend scheme: "prepend_scheme" (default "always"), or the older
// "add_prefix_space": false, which means "never".
Expected<std::string> PrependScheme(const JsonFile& f, const json& j, const std::string& path) {
  XRT_ASSIGN_OR_RETURN(std::optional<std::string> scheme, f.OptString(j, path, "prepend_scheme"));
  XRT_ASSIGN_OR_RETURN(bool add_prefix_space, f.OptBool(j, path, "add_prefix_space", true));
  if (scheme && *scheme != "always" && *scheme != "first" && *scheme != "never") {
    return f.Unsupported(path + ".prepend_scheme", "unsupported '{}'", *scheme);
  }
  if (!add_prefix_space) {
    if (scheme && *scheme != "never") {
      return f.Invalid(path + ".add_prefix_space", "false but prepend_scheme is '{}'", *scheme);
    }
    return std::string("never");
  }
  return scheme.value_or("always");
}

Status ParseNormalizer(const JsonFile& f, const json& j, const std::string& path,
                       TokenizerSpec* spec) {
  if (j.is_null()) return Status::Ok();
  XRT_ASSIGN_OR_RETURN(std::string type, TypeOf(f, j, path));
  if (type == "NFC") {
    if (!spec->normalizer_steps.empty()) {
      return f.Unsupported(path + ".type", "NFC after Prepend or Replace");
    }
    spec->normalizer = "nfc";
    return Status::Ok();
  }
  if (type == "Prepend") {
    XRT_ASSIGN_OR_RETURN(std::optional<std::string> prepend, f.OptString(j, path, "prepend"));
    if (!prepend) return f.Invalid(path + ".prepend", "missing");
    spec->normalizer_steps.push_back({"prepend", "", *prepend});
    return Status::Ok();
  }
  if (type == "Replace") {
    XRT_ASSIGN_OR_RETURN(ReplaceStep r, ParseReplace(f, j, path));
    spec->normalizer_steps.push_back({"replace", std::move(r.pattern), std::move(r.content)});
    return Status::Ok();
  }
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array())
      return f.Invalid(path + ".normalizers", "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      XRT_RETURN_IF_ERROR(
          ParseNormalizer(f, (*it)[i], JsonFile::Index(path + ".normalizers", i), spec));
    }
    return Status::Ok();
  }
  return f.Unsupported(path + ".type", "unsupported '{}'", type);
}

Status ParsePreTokenizer(const JsonFile& f, const json& root, TokenizerSpec* spec) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) {
    spec->byte_level = false;  // SentencePiece style (Llama 2): the normalizer spells spaces
    return Status::Ok();
  }
  // Flatten into (path, step).
  std::vector<std::pair<std::string, const json*>> steps;
  XRT_ASSIGN_OR_RETURN(std::string top_type, TypeOf(f, *it, "pre_tokenizer"));
  if (top_type == "Sequence") {
    auto list = it->find("pretokenizers");
    if (list == it->end() || !list->is_array()) {
      return f.Invalid("pre_tokenizer.pretokenizers", "expected an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      steps.emplace_back(JsonFile::Index("pre_tokenizer.pretokenizers", i), &(*list)[i]);
    }
  } else {
    steps.emplace_back("pre_tokenizer", &*it);
  }
  bool byte_level = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [path, step] = steps[i];
    XRT_ASSIGN_OR_RETURN(std::string type, TypeOf(f, *step, path));
    if (byte_level) {
      return f.Unsupported(path + ".type", "'{}' after ByteLevel (ByteLevel must come last)", type);
    }
    if (type == "Split") {
      auto pattern = step->find("pattern");
      if (pattern == step->end() || !pattern->is_object()) {
        return f.Invalid(path + ".pattern", "expected {{\"Regex\": ...}} or {{\"String\": ...}}");
      }
      if (auto r = pattern->find("Regex"); r != pattern->end() && r->is_string()) {
        spec->split_regexes.push_back(r->get<std::string>());
      } else if (auto s = pattern->find("String"); s != pattern->end() && s->is_string()) {
        spec->split_regexes.push_back(RegexEscape(s->get<std::string>()));
      } else {
        return f.Invalid(path + ".pattern", "expected {{\"Regex\": ...}} or {{\"String\": ...}}");
      }
      XRT_ASSIGN_OR_RETURN(std::optional<std::string> behavior,
                           f.OptString(*step, path, "behavior"));
      if (behavior.value_or("") != "Isolated") {
        return f.Unsupported(path + ".behavior", "unsupported '{}' (only Isolated)",
                             behavior.value_or("null"));
      }
      XRT_ASSIGN_OR_RETURN(bool invert, f.OptBool(*step, path, "invert", false));
      if (invert) return f.Unsupported(path + ".invert", "unsupported true");
    } else if (type == "Digits") {
      XRT_ASSIGN_OR_RETURN(bool individual, f.OptBool(*step, path, "individual_digits", false));
      spec->split_regexes.push_back(individual ? "\\p{N}" : "\\p{N}+");
    } else if (type == "Metaspace") {
      if (steps.size() != 1) {
        return f.Unsupported(path + ".type", "Metaspace together with other pre-tokenizers");
      }
      spec->byte_level = false;
      spec->metaspace = true;
      XRT_ASSIGN_OR_RETURN(spec->metaspace_replacement, OneChar(f, *step, path, "replacement"));
      XRT_ASSIGN_OR_RETURN(spec->metaspace_prepend_scheme, PrependScheme(f, *step, path));
      XRT_ASSIGN_OR_RETURN(spec->metaspace_split, f.OptBool(*step, path, "split", true));
      return Status::Ok();
    } else if (type == "ByteLevel") {
      byte_level = true;
      XRT_ASSIGN_OR_RETURN(spec->add_prefix_space,
                           f.OptBool(*step, path, "add_prefix_space", true));
      if (spec->add_prefix_space && i != 0) {
        return f.Unsupported(path + ".add_prefix_space",
                             "unsupported true when ByteLevel is not the first pre-tokenizer");
      }
      XRT_ASSIGN_OR_RETURN(bool use_regex, f.OptBool(*step, path, "use_regex", true));
      if (use_regex) spec->split_regexes.push_back(kGpt2SplitRegex);
    } else {
      return f.Unsupported(path + ".type", "unsupported '{}'", type);
    }
  }
  if (!byte_level) {
    return f.Unsupported("pre_tokenizer",
                         "no ByteLevel pre-tokenizer (Split and Digits are only supported before "
                         "ByteLevel; SentencePiece style needs null or Metaspace)");
  }
  return Status::Ok();
}

// What a post-processor adds around a single sequence.
struct Template {
  std::optional<int32_t> prefix, suffix;
};

Status ParsePostProcessor(const JsonFile& f, const json& j, const std::string& path,
                          Template* out) {
  if (j.is_null()) return Status::Ok();
  XRT_ASSIGN_OR_RETURN(std::string type, TypeOf(f, j, path));
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type == "Sequence") {
    auto list = j.find("processors");
    if (list == j.end() || !list->is_array())
      return f.Invalid(path + ".processors", "expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      XRT_RETURN_IF_ERROR(
          ParsePostProcessor(f, (*list)[i], JsonFile::Index(path + ".processors", i), out));
    }
    return Status::Ok();
  }
  if (type != "TemplateProcessing") return f.Unsupported(path + ".type", "unsupported '{}'", type);
  if (out->prefix || out->suffix) {
    return f.Unsupported(path, "more than one TemplateProcessing");
  }
  auto single = j.find("single");
  if (single == j.end() || !single->is_array())
    return f.Invalid(path + ".single", "expected an array");
  auto specials = j.find("special_tokens");
  // Items are {"SpecialToken": {"id": name}} or {"Sequence": {"id": "A"}}.
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string ipath = JsonFile::Index(path + ".single", i);
    if (item.is_object() && item.contains("Sequence")) {
      if (seen_sequence) return f.Unsupported(ipath, "more than one sequence");
      seen_sequence = true;
      continue;
    }
    auto st = item.is_object() ? item.find("SpecialToken") : item.end();
    if (!item.is_object() || st == item.end() || !st->is_object() || !st->contains("id") ||
        !(*st)["id"].is_string()) {
      return f.Invalid(ipath,
                       "expected {{\"SpecialToken\": {{\"id\": ...}}}} or {{\"Sequence\": ...}}");
    }
    const std::string name = (*st)["id"].get<std::string>();
    if (specials == j.end() || !specials->is_object() || !specials->contains(name)) {
      return f.Invalid(path + ".special_tokens", "no entry for '{}'", name);
    }
    const json& entry = (*specials)[name];
    const json ids = entry.is_object() ? entry.value("ids", json()) : json();
    if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer()) {
      return f.Unsupported(path + ".special_tokens." + name + ".ids", "only one id is supported");
    }
    std::optional<int32_t>& slot = seen_sequence ? out->suffix : out->prefix;
    if (slot) return f.Unsupported(ipath, "more than one special token on one side of $A");
    slot = ids[0].get<int32_t>();
  }
  if (!seen_sequence) return f.Invalid(path + ".single", "no $A sequence");
  return Status::Ok();
}

// One SentencePiece-style decoder step.
Status ParseDecoderStep(const JsonFile& f, const json& j, const std::string& path,
                        TokenizerSpec* spec) {
  XRT_ASSIGN_OR_RETURN(std::string type, TypeOf(f, j, path));
  DecoderStep step;
  if (type == "Replace") {
    XRT_ASSIGN_OR_RETURN(ReplaceStep r, ParseReplace(f, j, path));
    step.type = "replace";
    step.pattern = std::move(r.pattern);
    step.content = std::move(r.content);
  } else if (type == "ByteFallback") {
    step.type = "byte_fallback";
  } else if (type == "Fuse") {
    step.type = "fuse";
  } else if (type == "Strip") {
    step.type = "strip";
    XRT_ASSIGN_OR_RETURN(step.content, OneChar(f, j, path, "content"));
    XRT_ASSIGN_OR_RETURN(int64_t start, f.Int(j, path, "start"));
    XRT_ASSIGN_OR_RETURN(int64_t stop, f.Int(j, path, "stop"));
    if (start < 0 || start > INT32_MAX) return f.Invalid(path + ".start", "{} out of range", start);
    if (stop != 0) return f.Unsupported(path + ".stop", "unsupported {} (only 0)", stop);
    step.start = static_cast<int32_t>(start);
  } else if (type == "Metaspace") {
    step.type = "metaspace";
    XRT_ASSIGN_OR_RETURN(step.content, OneChar(f, j, path, "replacement"));
    XRT_ASSIGN_OR_RETURN(step.prepend_scheme, PrependScheme(f, j, path));
  } else if (type == "ByteLevel") {
    return f.Unsupported(path + ".type",
                         "ByteLevel with a pre-tokenizer that is not ByteLevel, or together with "
                         "other decoders");
  } else {
    return f.Unsupported(path + ".type", "unsupported '{}'", type);
  }
  spec->decoders.push_back(std::move(step));
  return Status::Ok();
}

Status ParseDecoder(const JsonFile& f, const json& root, TokenizerSpec* spec) {
  auto it = root.find("decoder");
  if (it == root.end() || it->is_null()) {
    return f.Unsupported("decoder", "null (tokens would be joined with spaces)");
  }
  XRT_ASSIGN_OR_RETURN(std::string type, TypeOf(f, *it, "decoder"));
  const json* only = &*it;
  std::string only_path = "decoder";
  auto list = it->find("decoders");
  if (type == "Sequence") {
    if (list == it->end() || !list->is_array()) {
      return f.Invalid("decoder.decoders", "expected an array");
    }
    if (list->size() == 1) {
      only = &(*list)[0];
      only_path = "decoder.decoders[0]";
    }
  }
  XRT_ASSIGN_OR_RETURN(std::string only_type, TypeOf(f, *only, only_path));
  if (spec->byte_level) {
    if (only_type == "ByteLevel") return Status::Ok();
    return f.Unsupported(only_path + ".type",
                         "unsupported '{}' (a ByteLevel pre-tokenizer needs a single ByteLevel "
                         "decoder)",
                         only_type);
  }
  if (type != "Sequence") return ParseDecoderStep(f, *it, "decoder", spec);
  for (size_t i = 0; i < list->size(); ++i) {
    XRT_RETURN_IF_ERROR(
        ParseDecoderStep(f, (*list)[i], JsonFile::Index("decoder.decoders", i), spec));
  }
  // Orders the runtime cannot stream (DecoderChain::Create) are errors here too.
  for (size_t i = 0, fused = 0; i < spec->decoders.size(); ++i) {
    const DecoderStep& d = spec->decoders[i];
    const std::string path = JsonFile::Index("decoder.decoders", i);
    if (d.type == "fuse") fused = 1;
    if (fused && d.type == "byte_fallback") return f.Unsupported(path, "ByteFallback after Fuse");
    if (fused && d.type == "replace" && !utf8::IsOneCharacter(d.pattern)) {
      return f.Unsupported(path + ".pattern", "a pattern of more than one character after Fuse");
    }
  }
  return Status::Ok();
}

// The id of a token named in tokenizer_config.json.
int32_t FindToken(const TokenizerSpec& spec, const std::string& content) {
  for (const AddedToken& t : spec.added_tokens) {
    if (t.content == content) return t.id;
  }
  for (size_t id = 0; id < spec.vocab.size(); ++id) {
    if (spec.vocab[id] == content) return static_cast<int32_t>(id);
  }
  return -1;
}

Status ParseConfig(const std::string& path, TokenizerSpec* spec, const Template& tmpl) {
  XRT_ASSIGN_OR_RETURN(json config, ReadJson(path));
  const JsonFile f(path);

  // added_tokens_decoder: {"<id>": {"content": ..., "special": ...}}; adds
  // tokens tokenizer.json does not list.
  if (auto atd = config.find("added_tokens_decoder"); atd != config.end() && atd->is_object()) {
    for (auto it = atd->begin(); it != atd->end(); ++it) {
      const std::string tpath = "added_tokens_decoder." + it.key();
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (...) {
        id = -1;
      }
      if (id < 0 || id > INT32_MAX) return f.Invalid(tpath, "key is not a token id");
      if (id > kMaxTokenId) {
        return f.Invalid(tpath, "{} is above the largest supported token id {}", id, kMaxTokenId);
      }
      if (!it.value().is_object()) return f.Invalid(tpath, "expected an object");
      XRT_ASSIGN_OR_RETURN(std::optional<std::string> content,
                           f.OptString(it.value(), tpath, "content"));
      if (!content || content->empty()) return f.Invalid(tpath + ".content", "missing or empty");
      auto known = std::find_if(spec->added_tokens.begin(), spec->added_tokens.end(),
                                [&](const AddedToken& t) { return t.id == id; });
      if (known != spec->added_tokens.end()) {
        if (known->content != *content) {
          return f.Invalid(tpath + ".content", "'{}' but tokenizer.json has '{}'", *content,
                           known->content);
        }
        continue;
      }
      AddedToken token;
      token.id = static_cast<int32_t>(id);
      token.content = *content;
      XRT_ASSIGN_OR_RETURN(token.special, f.OptBool(it.value(), tpath, "special", false));
      XRT_ASSIGN_OR_RETURN(token.lstrip, f.OptBool(it.value(), tpath, "lstrip", false));
      XRT_ASSIGN_OR_RETURN(token.rstrip, f.OptBool(it.value(), tpath, "rstrip", false));
      XRT_ASSIGN_OR_RETURN(token.single_word, f.OptBool(it.value(), tpath, "single_word", false));
      XRT_ASSIGN_OR_RETURN(token.normalized,
                           f.OptBool(it.value(), tpath, "normalized", !token.special));
      if (static_cast<size_t>(id) >= spec->vocab.size()) spec->vocab.resize(id + 1);
      spec->added_tokens.push_back(std::move(token));
    }
  }

  // bos_token etc.: a string, {"content": ...}, or null.
  struct Named {
    const char* key;
    int32_t* id;
  };
  for (const Named& n : {Named{"bos_token", &spec->bos_id}, Named{"eos_token", &spec->eos_id},
                         Named{"pad_token", &spec->pad_id}, Named{"unk_token", &spec->unk_id}}) {
    auto it = config.find(n.key);
    if (it == config.end() || it->is_null()) continue;
    std::string content;
    if (it->is_string()) {
      content = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      content = (*it)["content"].get<std::string>();
    } else {
      return f.Invalid(n.key, "expected a string or {{\"content\": ...}}");
    }
    const int32_t id = FindToken(*spec, content);
    if (id < 0) {
      return NotFoundError("{}: field '{}': token '{}' is not in the vocabulary", path, n.key,
                           content);
    }
    if (n.id == &spec->bos_id && tmpl.prefix && *tmpl.prefix != id) {
      return UnimplementedError(
          "{}: field 'bos_token': '{}' (id {}) but the post_processor prepends id {}", path,
          content, id, *tmpl.prefix);
    }
    if (n.id == &spec->unk_id && spec->unk_id >= 0) continue;  // model.unk_token wins
    *n.id = id;
  }
  if (auto it = config.find("add_bos_token"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) return f.Invalid("add_bos_token", "expected true or false");
    spec->add_bos = it->get<bool>();
  }
  if (auto it = config.find("add_eos_token"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) return f.Invalid("add_eos_token", "expected true or false");
    spec->add_eos = it->get<bool>();
  }
  if (spec->add_bos && spec->bos_id < 0) {
    return f.Invalid("add_bos_token", "true but there is no bos_token");
  }
  if (spec->add_eos && spec->eos_id < 0) {
    return f.Invalid("add_eos_token", "true but there is no eos_token");
  }
  return Status::Ok();
}

Expected<TokenizerSpec> LoadTokenizerJsonImpl(const std::string& tokenizer_json_path,
                                              const std::string& tokenizer_config_path) {
  XRT_ASSIGN_OR_RETURN(json root, ReadJson(tokenizer_json_path));
  const JsonFile f(tokenizer_json_path);
  TokenizerSpec spec;
  std::unordered_map<std::string, int32_t> vocab_ids;
  XRT_RETURN_IF_ERROR(ParseModel(f, root, &spec, &vocab_ids));
  XRT_RETURN_IF_ERROR(ParseAddedTokens(f, root, &spec));
  XRT_RETURN_IF_ERROR(ParseNormalizer(f, root.value("normalizer", json()), "normalizer", &spec));
  XRT_RETURN_IF_ERROR(ParsePreTokenizer(f, root, &spec));
  Template tmpl;
  XRT_RETURN_IF_ERROR(
      ParsePostProcessor(f, root.value("post_processor", json()), "post_processor", &tmpl));
  XRT_RETURN_IF_ERROR(ParseDecoder(f, root, &spec));
  if (spec.byte_level && spec.byte_fallback) {
    return f.Unsupported("model.byte_fallback", "true with a ByteLevel pre-tokenizer");
  }
  for (const auto& [side, id] :
       {std::pair{"prefix", tmpl.prefix}, std::pair{"suffix", tmpl.suffix}}) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= spec.vocab.size())) {
      return f.Invalid("post_processor", "{} token id {} outside the vocabulary", side, *id);
    }
  }
  if (tmpl.prefix) {
    spec.bos_id = *tmpl.prefix;
    spec.add_bos = true;
  }
  if (tmpl.suffix) {
    spec.eos_id = *tmpl.suffix;
    spec.add_eos = true;
  }
  if (!tokenizer_config_path.empty()) {
    XRT_RETURN_IF_ERROR(ParseConfig(tokenizer_config_path, &spec, tmpl));
  }
  return spec;
}

// What a GGUF tokenizer.ggml.pre name implies, as llama.cpp reads it
// (llama_vocab::impl::load): the split regexes of the model's tokenizer.json,
// BPE ignore_merges, whether a BOS is prepended when tokenizer.ggml.add_bos_token
// is absent, and the normalizer the model's tokenizer.json has (llama.cpp
// normalizes nothing; Hugging Face's Qwen2 tokenizer.json has NFC).
struct GgufPre {
  const char* name;
  bool individual_digits;
  const char* regex;
  bool ignore_merges = false;
  bool default_add_bos = false;
  const char* normalizer = "";
};
constexpr GgufPre kGgufPres[] = {
    {"", false, kGpt2SplitRegex},
    {"default", false, kGpt2SplitRegex},
    {"gpt2", false, kGpt2SplitRegex},
    {"llama-bpe", false, kLlama3SplitRegex, /*ignore_merges=*/true, /*default_add_bos=*/true},
    {"llama3", false, kLlama3SplitRegex, /*ignore_merges=*/true, /*default_add_bos=*/true},
    {"llama-v3", false, kLlama3SplitRegex, /*ignore_merges=*/true, /*default_add_bos=*/true},
    {"smaug-bpe", false, kLlama3SplitRegex},
    {"qwen2", false, kQwen2SplitRegex, false, false, /*normalizer=*/"nfc"},
    {"deepseek-r1-qwen", false, kQwen2SplitRegex},
    {"smollm", true, kGpt2SplitRegex},
    {"starcoder", true, kGpt2SplitRegex},
};

}  // namespace

Expected<TokenizerSpec> LoadTokenizerJson(const std::string& tokenizer_json_path,
                                          const std::string& tokenizer_config_path) {
  // Every access is type-checked first; this only guards against a missed case.
  try {
    return LoadTokenizerJsonImpl(tokenizer_json_path, tokenizer_config_path);
  } catch (const std::exception& e) {
    return DataLossError("{}: malformed tokenizer files: {}", tokenizer_json_path, e.what());
  }
}

Expected<TokenizerSpec> TokenizerSpecFromGguf(const GgufTokenizerMetadata& meta) {
  if (meta.model != "gpt2") {
    return UnimplementedError("GGUF tokenizer.ggml.model: unsupported '{}' (only 'gpt2')",
                              meta.model);
  }
  const GgufPre* pre = nullptr;
  for (const GgufPre& p : kGgufPres) {
    if (meta.pre == p.name) pre = &p;
  }
  if (pre == nullptr)
    return UnimplementedError("GGUF tokenizer.ggml.pre: unsupported '{}'", meta.pre);
  const size_t n = meta.tokens.size();
  if (n == 0) return DataLossError("GGUF tokenizer.ggml.tokens: empty");
  if (!meta.token_types.empty() && meta.token_types.size() != n) {
    return DataLossError("GGUF tokenizer.ggml.token_type: {} entries for {} tokens",
                         meta.token_types.size(), n);
  }

  TokenizerSpec spec;
  spec.individual_digits = pre->individual_digits;
  spec.split_regexes = {pre->regex};
  spec.ignore_merges = pre->ignore_merges;
  spec.normalizer = pre->normalizer;
  spec.add_prefix_space = meta.add_space_prefix;
  spec.vocab = meta.tokens;
  for (size_t id = 0; id < n; ++id) {
    if (!utf8::IsValid(meta.tokens[id])) {
      return DataLossError("GGUF tokenizer.ggml.tokens[{}]: not valid UTF-8", id);
    }
    const int32_t type = meta.token_types.empty() ? 1 : meta.token_types[id];
    // Control and user-defined tokens are stored as their text, which need not
    // be spelled in the byte-level alphabet (DeepSeek's "<｜User｜>"); like
    // llama.cpp, they are matched verbatim before pre-tokenization.
    if ((type != 3 && type != 4) || meta.tokens[id].empty()) continue;
    AddedToken token;
    token.id = static_cast<int32_t>(id);
    token.content = meta.tokens[id];
    token.special = type == 3;
    spec.added_tokens.push_back(std::move(token));
  }
  spec.merges.reserve(meta.merges.size());
  for (size_t i = 0; i < meta.merges.size(); ++i) {
    const std::string& m = meta.merges[i];
    // Byte-level tokens never contain a space (it is spelled 'Ġ').
    const size_t space = m.find(' ');
    if (space == std::string::npos) {
      return DataLossError("GGUF tokenizer.ggml.merges[{}]: '{}' has no space", i, m);
    }
    spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  for (const auto& [name, src, dst] :
       {std::tuple{"bos", meta.bos_id, &spec.bos_id}, std::tuple{"eos", meta.eos_id, &spec.eos_id},
        std::tuple{"unknown", meta.unk_id, &spec.unk_id},
        std::tuple{"padding", meta.pad_id, &spec.pad_id}}) {
    if (src < -1 || src >= static_cast<int64_t>(n)) {
      return DataLossError("GGUF tokenizer.ggml.{}_token_id: {} outside the vocabulary [0, {})",
                           name, src, n);
    }
    *dst = src;
  }
  spec.add_bos = meta.add_bos.value_or(pre->default_add_bos);
  if (spec.add_bos && spec.bos_id < 0) {
    if (!meta.add_bos.has_value()) {
      return DataLossError(
          "GGUF tokenizer.ggml.bos_token_id: missing, and tokenizer.ggml.pre '{}' prepends a BOS "
          "when tokenizer.ggml.add_bos_token is absent",
          meta.pre);
    }
    return DataLossError("GGUF tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
  }
  if (meta.add_eos && spec.eos_id < 0) {
    return DataLossError("GGUF tokenizer.ggml.add_eos_token is true but there is no eos_token_id");
  }
  spec.add_eos = meta.add_eos;
  return spec;
}

}  // namespace xrt
