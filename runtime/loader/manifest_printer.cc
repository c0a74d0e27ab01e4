#include "runtime/loader/manifest_printer.h"

#include <fmt/ranges.h>

#include <map>

#include "runtime/loader/segment_checksum.h"
#include "schemas/artifact_generated.h"

namespace xrt {
namespace {

using nlohmann::json;

// The segment's checksum digest in hex ("" when it has none, as in format 1.0).
std::string ChecksumHex(const xpk::Segment& s) {
  return s.checksum() ? HexDigest(s.checksum()->data(), s.checksum()->size()) : std::string();
}

// `s` with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD:
// manifest strings come from the file, and JSON (and terminals) need valid UTF-8.
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      len = 1;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? c : (c & (0x7f >> len));
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    ok = ok && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string Str(const flatbuffers::String* s) {
  return s ? ValidUtf8(s->string_view()) : std::string();
}

template <typename T>
uint32_t Count(const flatbuffers::Vector<T>* v) {
  return v ? v->size() : 0;
}

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", n);
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string ShapeText(const flatbuffers::Vector<int64_t>* shape) {
  std::string s = "[";
  for (uint32_t i = 0; i < Count(shape); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape->Get(i));
  }
  return s + "]";
}

json ShapeJson(const flatbuffers::Vector<int64_t>* shape) {
  json a = json::array();
  for (uint32_t i = 0; i < Count(shape); ++i) a.push_back(shape->Get(i));
  return a;
}

// "dispatch" or the ukernel's name.
std::string CommandKindName(const xpk::Command& c) {
  if (c.kind() == xpk::CommandKind::dispatch) return "dispatch";
  return xpk::EnumNameUkernel(c.ukernel());
}

int64_t BucketOf(const xpk::Executable& e) { return ExecutableBucket(e); }

const char* BucketParamName(xpk::ExecutableKind k) {
  switch (k) {
    case xpk::ExecutableKind::lm_step:
      return "num_tokens";
    case xpk::ExecutableKind::lm_logits:
      return "num_reqs";
    case xpk::ExecutableKind::vision_encode:
      return "num_images";
  }
  return "bucket";
}

json TensorSpecJson(const xpk::TensorSpec& t) {
  return json{{"name", Str(t.name())},
              {"dtype", xpk::EnumNameDType(t.dtype())},
              {"shape", ShapeJson(t.shape())},
              {"offset", t.offset()},
              {"size", t.size()}};
}

std::vector<int64_t> Ints(const flatbuffers::Vector<int64_t>* v) {
  return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>();
}
std::vector<float> Floats(const flatbuffers::Vector<float>* v) {
  return v ? std::vector<float>(v->begin(), v->end()) : std::vector<float>();
}

json PreprocessJson(const xpk::ImagePreprocess& p) {
  return json{{"processor_class", Str(p.processor_class())},
              {"do_convert_rgb", p.do_convert_rgb()},
              {"do_resize", p.do_resize()},
              {"shortest_edge", p.shortest_edge()},
              {"resize_height", p.resize_height()},
              {"resize_width", p.resize_width()},
              {"resample", p.resample()},
              {"do_center_crop", p.do_center_crop()},
              {"crop_height", p.crop_height()},
              {"crop_width", p.crop_width()},
              {"do_rescale", p.do_rescale()},
              {"rescale_factor", p.rescale_factor()},
              {"do_normalize", p.do_normalize()},
              {"image_mean", Floats(p.image_mean())},
              {"image_std", Floats(p.image_std())}};
}

json VisionJson(const xpk::VisionConfig& v) {
  json j{{"tower", Str(v.tower())},
         {"hidden_size", v.hidden_size()},
         {"intermediate_size", v.intermediate_size()},
         {"num_layers", v.num_layers()},
         {"num_attention_heads", v.num_attention_heads()},
         {"image_size", v.image_size()},
         {"patch_size", v.patch_size()},
         {"num_channels", v.num_channels()},
         {"layer_norm_eps", v.layer_norm_eps()},
         {"hidden_act", Str(v.hidden_act())},
         {"feature_layers", Ints(v.feature_layers())},
         {"select_strategy", Str(v.select_strategy())},
         {"projector_act", Str(v.projector_act())},
         {"projector_bias", v.projector_bias()},
         {"image_token_id", v.image_token_id()},
         {"image_token", Str(v.image_token())},
         {"tokens_per_image", v.tokens_per_image()},
         {"encoder_cache_rows", v.encoder_cache_rows()}};
  if (v.preprocess()) j["preprocess"] = PreprocessJson(*v.preprocess());
  return j;
}

json ConfigJson(const xpk::ModelConfig& c) {
  json j{{"architecture", Str(c.architecture())},
         {"vocab_size", c.vocab_size()},
         {"hidden_size", c.hidden_size()},
         {"intermediate_size", c.intermediate_size()},
         {"num_hidden_layers", c.num_hidden_layers()},
         {"num_attention_heads", c.num_attention_heads()},
         {"num_key_value_heads", c.num_key_value_heads()},
         {"head_dim", c.head_dim()},
         {"max_position_embeddings", c.max_position_embeddings()},
         {"rms_norm_eps", c.rms_norm_eps()},
         {"rope_theta", c.rope_theta()},
         {"tie_word_embeddings", c.tie_word_embeddings()},
         {"attention_bias", c.attention_bias()},
         {"has_chat_template", c.chat_template() != nullptr && c.chat_template()->size() > 0},
         {"default_temperature", c.default_temperature()},
         {"default_top_p", c.default_top_p()},
         {"default_top_k", c.default_top_k()},
         {"default_repetition_penalty", c.default_repetition_penalty()}};
  json eos = json::array();
  for (uint32_t i = 0; i < Count(c.eos_token_ids()); ++i) eos.push_back(c.eos_token_ids()->Get(i));
  j["eos_token_ids"] = eos;
  if (const xpk::RopeScaling* r = c.rope_scaling()) {
    j["rope_scaling"] =
        json{{"type", Str(r->type())},
             {"factor", r->factor()},
             {"low_freq_factor", r->low_freq_factor()},
             {"high_freq_factor", r->high_freq_factor()},
             {"original_max_position_embeddings", r->original_max_position_embeddings()}};
  }
  if (c.vision()) j["vision"] = VisionJson(*c.vision());
  return j;
}

json LimitsJson(const xpk::ServingLimits& l) {
  return json{{"max_num_seqs", l.max_num_seqs()},
              {"max_num_batched_tokens", l.max_num_batched_tokens()},
              {"max_model_len", l.max_model_len()},
              {"block_size", l.block_size()},
              {"max_blocks_per_req", l.max_blocks_per_req()},
              {"max_images", l.max_images()},
              {"max_loras", l.max_loras()},
              {"max_lora_rank", l.max_lora_rank()}};
}

json TokenizerJson(const xpk::Tokenizer& t) {
  uint32_t special = 0;
  json specials = json::array();
  for (uint32_t i = 0; i < Count(t.added_tokens()); ++i) {
    const xpk::AddedToken* a = t.added_tokens()->Get(i);
    if (a->special()) {
      ++special;
      specials.push_back(json{{"id", a->id()}, {"content", Str(a->content())}});
    }
  }
  json regexes = json::array();
  for (uint32_t i = 0; i < Count(t.split_regexes()); ++i) {
    regexes.push_back(Str(t.split_regexes()->Get(i)));
  }
  return json{{"model", Str(t.model())},
              {"vocab_size", Count(t.vocab())},
              {"num_merges", Count(t.merges())},
              {"num_added_tokens", Count(t.added_tokens())},
              {"num_special_tokens", special},
              {"special_tokens", specials},
              {"normalizer", Str(t.normalizer())},
              {"split_regexes", regexes},
              {"individual_digits", t.individual_digits()},
              {"add_prefix_space", t.add_prefix_space()},
              {"ignore_merges", t.ignore_merges()},
              {"bos_id", t.bos_id()},
              {"eos_id", t.eos_id()},
              {"pad_id", t.pad_id()},
              {"unk_id", t.unk_id()},
              {"add_bos", t.add_bos()},
              {"add_eos", t.add_eos()}};
}

std::map<std::string, uint32_t> CommandCounts(const xpk::Executable& e) {
  std::map<std::string, uint32_t> counts;
  for (uint32_t i = 0; i < Count(e.commands()); ++i)
    ++counts[CommandKindName(*e.commands()->Get(i))];
  return counts;
}

json ExecutableJson(const xpk::Executable& e) {
  json inputs = json::array(), outputs = json::array(), commands = json::array();
  for (uint32_t i = 0; i < Count(e.inputs()); ++i)
    inputs.push_back(TensorSpecJson(*e.inputs()->Get(i)));
  for (uint32_t i = 0; i < Count(e.outputs()); ++i)
    outputs.push_back(TensorSpecJson(*e.outputs()->Get(i)));
  for (uint32_t i = 0; i < Count(e.commands()); ++i) {
    const xpk::Command* c = e.commands()->Get(i);
    json jc{{"kind", xpk::EnumNameCommandKind(c->kind())}};
    if (c->kind() == xpk::CommandKind::dispatch) {
      jc["function"] = c->function();
      jc["workgroups"] = c->workgroups();
    } else {
      jc["ukernel"] = xpk::EnumNameUkernel(c->ukernel());
      if (c->ukernel() == xpk::Ukernel::matmul || c->ukernel() == xpk::Ukernel::attention ||
          c->ukernel() == xpk::Ukernel::paged_attention)
        jc["compute"] = xpk::EnumNameComputeType(c->compute());
    }
    json bindings = json::array();
    for (uint32_t b = 0; b < Count(c->bindings()); ++b) {
      const xpk::Binding* bd = c->bindings()->Get(b);
      bindings.push_back(json{{"kind", xpk::EnumNameBindingKind(bd->kind())},
                              {"index", bd->index()},
                              {"offset", bd->offset()},
                              {"size", bd->size()}});
    }
    jc["bindings"] = bindings;
    json ip = json::array(), fp = json::array();
    for (uint32_t p = 0; p < Count(c->iparams()); ++p) ip.push_back(c->iparams()->Get(p));
    for (uint32_t p = 0; p < Count(c->fparams()); ++p) fp.push_back(c->fparams()->Get(p));
    jc["iparams"] = ip;
    jc["fparams"] = fp;
    if (c->label()) jc["label"] = Str(c->label());
    commands.push_back(std::move(jc));
  }
  json counts = json::object();
  for (const auto& [k, n] : CommandCounts(e)) counts[k] = n;
  return json{{"name", Str(e.name())},
              {"kind", xpk::EnumNameExecutableKind(e.kind())},
              {"num_tokens", e.num_tokens()},
              {"num_reqs", e.num_reqs()},
              {"num_images", e.num_images()},
              {"lora_mode", xpk::EnumNameLoraMode(e.lora_mode())},
              {"io_size", e.io_size()},
              {"arena_size", e.arena_size()},
              {"inputs", inputs},
              {"outputs", outputs},
              {"command_counts", counts},
              {"commands", commands}};
}

json ProvenanceJson(const ArtifactProvenance& p) {
  json options = json::array(), inputs = json::array();
  for (const auto& [k, v] : p.options)
    options.push_back(json{{"key", ValidUtf8(k)}, {"value", ValidUtf8(v)}});
  for (const auto& in : p.inputs) {
    inputs.push_back(json{{"path", ValidUtf8(in.path)},
                          {"role", ValidUtf8(in.role)},
                          {"size", in.size},
                          {"sha256", ValidUtf8(in.sha256)}});
  }
  return json{{"compiler_version", ValidUtf8(p.compiler_version)},
              {"llvm_version", ValidUtf8(p.llvm_version)},
              {"options", options},
              {"inputs", inputs}};
}

std::vector<std::string> Strings(
    const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  for (uint32_t i = 0; i < Count(v); ++i) out.push_back(Str(v->Get(i)));
  return out;
}

json LoraJson(const xpk::LoraConfig& l) {
  json targets = json::array(), adapters = json::array();
  for (uint32_t i = 0; i < Count(l.targets()); ++i) {
    const xpk::LoraTarget* t = l.targets()->Get(i);
    targets.push_back(json{{"name", Str(t->name())},
                           {"in_features", t->in_features()},
                           {"out_features", t->out_features()}});
  }
  for (uint32_t i = 0; i < Count(l.adapters()); ++i) {
    const xpk::LoraAdapter* a = l.adapters()->Get(i);
    adapters.push_back(json{{"name", Str(a->name())},
                            {"path", Str(a->path())},
                            {"rank", a->rank()},
                            {"modules", Strings(a->modules())},
                            {"base_model_name_or_path", Str(a->base_model_name_or_path())},
                            {"offset", a->offset()},
                            {"size", a->size()}});
  }
  json j{{"max_loras", l.max_loras()},
         {"max_lora_rank", l.max_lora_rank()},
         {"target_modules", Strings(l.target_modules())},
         {"num_targets", Count(l.targets())},
         {"targets", targets},
         {"adapters", adapters}};
  if (Count(l.adapters()) > 0) j["adapters_segment"] = l.adapters_segment();
  return j;
}

}  // namespace

nlohmann::json ManifestToJson(const Artifact& artifact) {
  const xpk::Manifest& m = artifact.manifest();
  const FileHeader& h = artifact.header();
  json j;
  j["path"] = ValidUtf8(artifact.path());
  j["format"] = json{{"major", h.format_major}, {"minor", h.format_minor}};
  j["file_size"] = h.file_size;
  j["manifest"] = json{{"offset", h.manifest_offset}, {"size", h.manifest_size}};
  j["config"] = ConfigJson(*m.config());
  j["limits"] = LimitsJson(*m.limits());
  j["tokenizer"] = TokenizerJson(*m.tokenizer());

  json segments = json::array();
  for (uint32_t i = 0; i < Count(m.segments()); ++i) {
    const xpk::Segment* s = m.segments()->Get(i);
    segments.push_back(
        json{{"kind", xpk::EnumNameSegmentKind(s->kind())},
             {"offset", s->offset()},
             {"size", s->size()},
             {"alignment", s->alignment()},
             {"checksum_algorithm", xpk::EnumNameChecksumAlgorithm(s->checksum_algorithm())},
             {"checksum", ChecksumHex(*s)}});
  }
  j["segments"] = segments;

  json weights = json::array();
  uint64_t weight_bytes = 0;
  for (uint32_t i = 0; i < Count(m.weights()); ++i) {
    const xpk::Weight* w = m.weights()->Get(i);
    weight_bytes += w->size();
    json jw{{"name", Str(w->name())},
            {"dtype", xpk::EnumNameDType(w->dtype())},
            {"shape", ShapeJson(w->shape())},
            {"layout", xpk::EnumNameWeightLayout(w->layout())},
            {"segment", w->segment()},
            {"offset", w->offset()},
            {"size", w->size()}};
    if (w->layout() == xpk::WeightLayout::packed_panels) jw["pack_nr"] = w->pack_nr();
    weights.push_back(std::move(jw));
  }
  j["weights"] = json{{"count", Count(m.weights())}, {"bytes", weight_bytes}, {"tensors", weights}};

  json code = json::array();
  for (uint32_t i = 0; i < Count(m.code()); ++i) {
    const xpk::CodeModule* c = m.code()->Get(i);
    json funcs = json::array(), req = json::array();
    for (uint32_t f = 0; f < Count(c->functions()); ++f)
      funcs.push_back(Str(c->functions()->Get(f)));
    for (uint32_t f = 0; f < Count(c->required_features()); ++f) {
      req.push_back(Str(c->required_features()->Get(f)));
    }
    code.push_back(json{{"target", Str(c->target())},
                        {"cpu", Str(c->cpu())},
                        {"features", Str(c->features())},
                        {"required_features", req},
                        {"segment", c->segment()},
                        {"abi_version", c->abi_version()},
                        {"functions", funcs}});
  }
  j["code"] = code;

  json exes = json::array();
  for (uint32_t i = 0; i < Count(m.executables()); ++i)
    exes.push_back(ExecutableJson(*m.executables()->Get(i)));
  j["executables"] = exes;
  if (m.lora()) j["lora"] = LoraJson(*m.lora());
  if (m.provenance()) j["provenance"] = ProvenanceJson(artifact.provenance());
  return j;
}

std::string ManifestToText(const Artifact& artifact) {
  const xpk::Manifest& m = artifact.manifest();
  const FileHeader& h = artifact.header();
  std::string out;
  auto line = [&out](const std::string& s) {
    out += s;
    out += '\n';
  };

  line(fmt::format("{}: xpk {}.{}, {} ({} bytes); manifest {} at offset {}",
                   ValidUtf8(artifact.path()), h.format_major, h.format_minor,
                   HumanBytes(h.file_size), h.file_size, HumanBytes(h.manifest_size),
                   h.manifest_offset));

  const xpk::ModelConfig& c = *m.config();
  line("config:");
  line(fmt::format("  architecture {}, vocab {}, hidden {}, intermediate {}, layers {}",
                   Str(c.architecture()), c.vocab_size(), c.hidden_size(), c.intermediate_size(),
                   c.num_hidden_layers()));
  line(fmt::format("  heads {} (kv {}), head_dim {}, max_position_embeddings {}",
                   c.num_attention_heads(), c.num_key_value_heads(), c.head_dim(),
                   c.max_position_embeddings()));
  std::string rope =
      fmt::format("  rms_norm_eps {}, rope_theta {}", c.rms_norm_eps(), c.rope_theta());
  if (c.rope_scaling() && c.rope_scaling()->type() && Str(c.rope_scaling()->type()) != "none") {
    rope += fmt::format(", rope_scaling {} x{}", Str(c.rope_scaling()->type()),
                        c.rope_scaling()->factor());
  }
  line(rope);
  std::string eos;
  for (uint32_t i = 0; i < Count(c.eos_token_ids()); ++i) {
    eos += (i ? "," : "") + std::to_string(c.eos_token_ids()->Get(i));
  }
  line(fmt::format("  tie_word_embeddings {}, attention_bias {}, eos [{}], chat template {}",
                   c.tie_word_embeddings(), c.attention_bias(), eos,
                   c.chat_template() && c.chat_template()->size() > 0
                       ? fmt::format("{} chars", c.chat_template()->size())
                       : "none"));
  if (const xpk::VisionConfig* v = c.vision()) {
    line(fmt::format("vision: {} tower, {} of its layers run, hidden {}, intermediate {}, heads {}",
                     Str(v->tower()), v->num_layers(), v->hidden_size(), v->intermediate_size(),
                     v->num_attention_heads()));
    line(fmt::format("  image {}x{}x{}, patch {}, {} {}, layer_norm_eps {}", v->num_channels(),
                     v->image_size(), v->image_size(), v->patch_size(), "act", Str(v->hidden_act()),
                     v->layer_norm_eps()));
    line(fmt::format("  feature layers [{}] ({}), projector {}{}",
                     fmt::join(Ints(v->feature_layers()), ","), Str(v->select_strategy()),
                     Str(v->projector_act()),
                     v->projector_bias() ? " with bias" : " without bias"));
    line(fmt::format("  image token {} '{}', {} tokens per image, encoder cache {} rows",
                     v->image_token_id(), Str(v->image_token()), v->tokens_per_image(),
                     v->encoder_cache_rows()));
    if (const xpk::ImagePreprocess* p = v->preprocess()) {
      std::string resize = !p->do_resize() ? "no resize"
                           : p->shortest_edge() > 0
                               ? fmt::format("shortest_edge {}", p->shortest_edge())
                               : fmt::format("resize {}x{}", p->resize_height(), p->resize_width());
      line(fmt::format(
          "  preprocess {}: convert_rgb {}, {} (resample {}), center_crop {}, "
          "rescale {}, normalize {} mean [{}] std [{}]",
          Str(p->processor_class()), p->do_convert_rgb(), resize, p->resample(),
          p->do_center_crop() ? fmt::format("{}x{}", p->crop_height(), p->crop_width()) : "off",
          p->do_rescale() ? fmt::format("{}", p->rescale_factor()) : "off", p->do_normalize(),
          fmt::join(Floats(p->image_mean()), ", "), fmt::join(Floats(p->image_std()), ", ")));
    }
  }

  const xpk::ServingLimits& l = *m.limits();
  line("limits:");
  line(fmt::format("  max_num_seqs {}, max_num_batched_tokens {}, max_model_len {}",
                   l.max_num_seqs(), l.max_num_batched_tokens(), l.max_model_len()));
  line(fmt::format(
      "  block_size {}, max_blocks_per_req {}, max_images {}, max_loras {}, max_lora_rank {}",
      l.block_size(), l.max_blocks_per_req(), l.max_images(), l.max_loras(), l.max_lora_rank()));

  const xpk::Tokenizer& t = *m.tokenizer();
  uint32_t special = 0;
  for (uint32_t i = 0; i < Count(t.added_tokens()); ++i)
    special += t.added_tokens()->Get(i)->special();
  line(fmt::format("tokenizer: {}, {} tokens, {} merges, {} added ({} special)", Str(t.model()),
                   Count(t.vocab()), Count(t.merges()), Count(t.added_tokens()), special));
  line(fmt::format(
      "  bos {}, eos {}, pad {}, unk {}, add_bos {}, add_eos {}, normalizer '{}', {} split regexes",
      t.bos_id(), t.eos_id(), t.pad_id(), t.unk_id(), t.add_bos(), t.add_eos(), Str(t.normalizer()),
      Count(t.split_regexes())));

  line(fmt::format("segments ({}):", Count(m.segments())));
  for (uint32_t i = 0; i < Count(m.segments()); ++i) {
    const xpk::Segment* s = m.segments()->Get(i);
    line(fmt::format("  {:>3}  {:<8} offset {:>12}  size {:>12} ({})  align {}  checksum {}{}", i,
                     xpk::EnumNameSegmentKind(s->kind()), s->offset(), s->size(),
                     HumanBytes(s->size()), s->alignment(),
                     xpk::EnumNameChecksumAlgorithm(s->checksum_algorithm()),
                     s->checksum() ? " " + ChecksumHex(*s) : ""));
  }

  uint64_t weight_bytes = 0;
  std::map<std::string, uint32_t> by_dtype;
  for (uint32_t i = 0; i < Count(m.weights()); ++i) {
    const xpk::Weight* w = m.weights()->Get(i);
    weight_bytes += w->size();
    ++by_dtype[fmt::format("{} {}", xpk::EnumNameDType(w->dtype()),
                           xpk::EnumNameWeightLayout(w->layout()))];
  }
  std::string kinds;
  for (const auto& [k, n] : by_dtype)
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, k);
  line(fmt::format("weights: {} tensors, {} ({} bytes){}", Count(m.weights()),
                   HumanBytes(weight_bytes), weight_bytes, kinds.empty() ? "" : "; " + kinds));

  line(fmt::format("code modules ({}):", Count(m.code())));
  for (uint32_t i = 0; i < Count(m.code()); ++i) {
    const xpk::CodeModule* cm = m.code()->Get(i);
    std::string req;
    for (uint32_t f = 0; f < Count(cm->required_features()); ++f) {
      req += (f ? "," : "") + Str(cm->required_features()->Get(f));
    }
    line(fmt::format("  {:>3}  {} cpu {} abi {}, segment {}, {} functions{}", i, Str(cm->target()),
                     Str(cm->cpu()), cm->abi_version(), cm->segment(), Count(cm->functions()),
                     req.empty() ? "" : ", requires " + req));
  }

  line(fmt::format("executables ({}):", Count(m.executables())));
  for (uint32_t i = 0; i < Count(m.executables()); ++i) {
    const xpk::Executable& e = *m.executables()->Get(i);
    std::string counts;
    for (const auto& [k, n] : CommandCounts(e))
      counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, k);
    line(fmt::format("  {} ({}, {} {}, lora {}): io {} B, arena {} B, {} commands{}", Str(e.name()),
                     xpk::EnumNameExecutableKind(e.kind()), BucketParamName(e.kind()), BucketOf(e),
                     xpk::EnumNameLoraMode(e.lora_mode()), e.io_size(), e.arena_size(),
                     Count(e.commands()), counts.empty() ? "" : " (" + counts + ")"));
    for (int io = 0; io < 2; ++io) {
      const auto* specs = io == 0 ? e.inputs() : e.outputs();
      for (uint32_t s = 0; s < Count(specs); ++s) {
        const xpk::TensorSpec* ts = specs->Get(s);
        line(fmt::format("      {} {:<20} {} {} @{} ({} B)", io == 0 ? "in " : "out",
                         Str(ts->name()), xpk::EnumNameDType(ts->dtype()), ShapeText(ts->shape()),
                         ts->offset(), ts->size()));
      }
    }
  }

  if (const xpk::LoraConfig* lora = m.lora()) {
    line(fmt::format("lora: {} slots, rank {}, target modules [{}], {} targets, {} packed adapters",
                     lora->max_loras(), lora->max_lora_rank(),
                     fmt::join(Strings(lora->target_modules()), ","), Count(lora->targets()),
                     Count(lora->adapters())));
    for (uint32_t i = 0; i < Count(lora->adapters()); ++i) {
      const xpk::LoraAdapter* a = lora->adapters()->Get(i);
      line(fmt::format(
          "  adapter {}: rank {}, modules [{}], {} ({} bytes) at offset {} of segment "
          "{}, from {}",
          Str(a->name()), a->rank(), fmt::join(Strings(a->modules()), ","), HumanBytes(a->size()),
          a->size(), a->offset(), lora->adapters_segment(), Str(a->path())));
    }
  } else {
    line("lora: none");
  }

  if (m.provenance()) {
    ArtifactProvenance p = artifact.provenance();
    line(fmt::format("provenance: compiler {}, llvm {}", ValidUtf8(p.compiler_version),
                     ValidUtf8(p.llvm_version)));
    for (const auto& [k, v] : p.options) {
      line(fmt::format("  option {} = {}", ValidUtf8(k), ValidUtf8(v)));
    }
    for (const auto& in : p.inputs) {
      line(fmt::format("  input {} {} ({} bytes) sha256 {}", ValidUtf8(in.role), ValidUtf8(in.path),
                       in.size, ValidUtf8(in.sha256)));
    }
  } else {
    line("provenance: none");
  }
  return out;
}

}  // namespace xrt
