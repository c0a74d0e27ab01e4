#include "compiler/frontend/hf_model_source.h"

#include <sys/stat.h>
#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "compiler/frontend/decoder_tensors.h"
#include "compiler/frontend/hf_config.h"
#include "compiler/frontend/safetensors.h"
#include "compiler/frontend/source_dtype.h"
#include "runtime/tokenizer/tokenizer_import.h"

namespace xcc {
namespace {

using json = nlohmann::json;

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Checkpoint tensors transformers skips when loading a Llama/Qwen2/Mistral
// model (PreTrainedModel._adjust_missing_and_unexpected_keys): the
// rotary_emb.inv_freq buffers older checkpoints saved per layer.
bool IgnoredByTransformers(const std::string& name) {
  return name.find("rotary_emb.inv_freq") != std::string::npos;
}

// A LLaVA checkpoint's tensor name in the frontend's vocabulary: the decoder's
// as a plain *ForCausalLM names them, the tower and projector as transformers
// < 4.52 saved them. Both checkpoint layouts occur in the wild:
//   >= 4.52: model.language_model.*, lm_head.*, model.vision_tower.*, model.multi_modal_projector.*
//   <  4.52: language_model.model.*, language_model.lm_head.*, vision_tower.*,
//   multi_modal_projector.*
// (transformers 5's save_pretrained also writes the tower without its `vision_model.` level).
std::string NormalizeLlavaTensorName(const std::string& name) {
  static const std::pair<const char*, const char*> kRenames[] = {
      {"model.language_model.", "model."},
      {"language_model.model.", "model."},
      {"language_model.lm_head.", "lm_head."},
      {"model.vision_tower.", "vision_tower."},
      {"model.multi_modal_projector.", "multi_modal_projector."},
  };
  std::string out = name;
  for (const auto& [from, to] : kRenames) {
    const size_t n = std::char_traits<char>::length(from);
    if (out.compare(0, n, from) == 0) {
      out = to + out.substr(n);
      break;
    }
  }
  // transformers 5's own save_pretrained drops the tower's `vision_model.` level.
  const std::string tower = "vision_tower.", level = "vision_tower.vision_model.";
  if (out.compare(0, tower.size(), tower) == 0 && out.compare(0, level.size(), level) != 0)
    out = level + out.substr(tower.size());
  return out;
}

class HfModelSource final : public IndexedModelSource {
 public:
  std::vector<std::string> input_files() const override { return files_; }

  Status Load(const std::string& dir);

 private:
  Status LoadWeights();
  Status LoadImageProcessor();
  Status AddShard(const std::string& path);

  std::string dir_;
  std::vector<std::string> files_;
  std::vector<SafetensorsFile> shards_;
};

Status HfModelSource::Load(const std::string& dir) {
  dir_ = dir;
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  origin_ = dir_;
  const std::string config_path = dir_ + "/config.json";
  if (!IsFile(config_path)) {
    return xrt::NotFoundError("{}: not a Hugging Face model directory: config.json missing", dir_);
  }
  files_.push_back(config_path);
  XRT_ASSIGN_OR_RETURN(HfConfig hf, LoadHfConfig(config_path));
  config_ = hf.decoder;
  vision_ = hf.vision;

  const std::string gen_path = dir_ + "/generation_config.json";
  if (IsFile(gen_path)) {
    files_.push_back(gen_path);
    XRT_ASSIGN_OR_RETURN(generation_, LoadGenerationConfig(gen_path));
  }
  if (generation_.eos_token_ids.empty()) generation_.eos_token_ids = hf.eos_token_ids;

  const std::string tok_path = dir_ + "/tokenizer.json";
  if (!IsFile(tok_path)) return xrt::NotFoundError("{}: missing", tok_path);
  files_.push_back(tok_path);
  std::string tok_config_path = dir_ + "/tokenizer_config.json";
  if (IsFile(tok_config_path)) {
    files_.push_back(tok_config_path);  // read by the tokenizer import (bos/eos, add_bos)
  } else {
    tok_config_path.clear();
  }
  XRT_ASSIGN_OR_RETURN(tokenizer_, xrt::LoadTokenizerJson(tok_path, tok_config_path));

  XRT_ASSIGN_OR_RETURN(chat_template_, LoadHfChatTemplate(dir_, &files_));
  if (vision_) {
    XRT_RETURN_IF_ERROR(LoadImageProcessor());
    // The image placeholder's text, from the tokenizer.
    for (const xrt::AddedToken& t : tokenizer_.added_tokens)
      if (t.id == vision_->image_token_id) vision_->image_token = t.content;
    if (vision_->image_token.empty())
      return xrt::InvalidArgumentError(
          "{}: field 'image_token_index': token {} is not an added token of {} (the image "
          "placeholder must be one)",
          config_path, vision_->image_token_id, tok_path);
  }
  XRT_RETURN_IF_ERROR(LoadWeights());

  std::sort(files_.begin(), files_.end());
  files_.erase(std::unique(files_.begin(), files_.end()), files_.end());
  return ValidateDecoderTensors(*this, IgnoredByTransformers).WithContext(dir_);
}

// The image processor of a LLaVA directory: preprocessor_config.json, else the
// "image_processor" object of processor_config.json. Its output must be the
// tower's image_size square, and the processor's own count of image tokens
// (patch_size, num_additional_image_tokens in processor_config.json, when given)
// must be the tower's: HF would otherwise fail every request with "Image features
// and image tokens do not match".
Status HfModelSource::LoadImageProcessor() {
  const std::string pre = dir_ + "/preprocessor_config.json";
  const std::string proc = dir_ + "/processor_config.json";
  json processor;
  if (IsFile(proc)) {
    files_.push_back(proc);
    XRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(proc));
    processor = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (processor.is_discarded() || !processor.is_object())
      return xrt::DataLossError("{}: not a valid JSON object", proc);
  }
  std::string source;
  json image_processor;
  if (IsFile(pre)) {
    files_.push_back(pre);
    source = pre;
    XRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(pre));
    image_processor = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (image_processor.is_discarded() || !image_processor.is_object())
      return xrt::DataLossError("{}: not a valid JSON object", pre);
  } else if (processor.is_object() && processor.contains("image_processor")) {
    source = proc;
    image_processor = processor;  // ParseImageProcessorConfig reads its "image_processor"
  } else {
    return xrt::NotFoundError(
        "{}: a LLaVA model needs its image processor: neither preprocessor_config.json nor "
        "processor_config.json with an 'image_processor' found",
        dir_);
  }
  VisionConfig& v = *vision_;
  XRT_ASSIGN_OR_RETURN(v.preprocess, xrt::ParseImageProcessorConfig(image_processor, source));
  std::optional<xrt::ImageSize> size = xrt::FixedOutputSize(v.preprocess);
  if (!size || size->height != v.image_size || size->width != v.image_size)
    return xrt::InvalidArgumentError(
        "{}: the image processor makes {} images but the vision tower takes {}x{} "
        "(vision_config.image_size)",
        source, size ? fmt::format("{}x{}", size->height, size->width) : "variable-size",
        v.image_size, v.image_size);
  if (processor.is_object()) {
    auto patch = processor.find("patch_size");
    if (patch != processor.end() && patch->is_number_integer() &&
        patch->get<int64_t>() != v.patch_size)
      return xrt::InvalidArgumentError(
          "{}: field 'patch_size': {} but vision_config.patch_size is {}", proc,
          patch->get<int64_t>(), v.patch_size);
    auto extra = processor.find("num_additional_image_tokens");
    if (extra != processor.end() && extra->is_number_integer()) {
      const int64_t tokens =
          v.grid() * v.grid() + extra->get<int64_t>() - (v.select_strategy == "default" ? 1 : 0);
      if (tokens != v.tokens_per_image())
        return xrt::InvalidArgumentError(
            "{}: field 'num_additional_image_tokens': {} gives {} tokens per image, but the "
            "tower yields {} feature rows ({} strategy)",
            proc, extra->get<int64_t>(), tokens, v.tokens_per_image(), v.select_strategy);
    }
  }
  return Status::Ok();
}

Status HfModelSource::AddShard(const std::string& path) {
  files_.push_back(path);
  XRT_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  shards_.push_back(std::move(f));
  return Status::Ok();
}

Status HfModelSource::LoadWeights() {
  const std::string index_path = dir_ + "/model.safetensors.index.json";
  const std::string single_path = dir_ + "/model.safetensors";
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  if (IsFile(index_path)) {
    files_.push_back(index_path);
    XRT_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return xrt::DataLossError("{}: not a valid JSON object", index_path);
    }
    auto wm = j.find("weight_map");
    if (wm == j.end()) return xrt::NotFoundError("{}: field 'weight_map': missing", index_path);
    if (!wm->is_object()) {
      return xrt::InvalidArgumentError("{}: field 'weight_map': expected an object, got {}",
                                       index_path, wm->type_name());
    }
    std::set<std::string> shard_names;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return xrt::InvalidArgumentError("{}: field 'weight_map.{}': expected a file name, got {}",
                                         index_path, it.key(), it.value().type_name());
      }
      std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard[0] == '/' || shard.find("..") != std::string::npos) {
        return xrt::InvalidArgumentError(
            "{}: field 'weight_map.{}': shard '{}' is not a file name inside the directory",
            index_path, it.key(), shard);
      }
      weight_map[it.key()] = shard;
      shard_names.insert(shard);
    }
    if (shard_names.empty()) return xrt::DataLossError("{}: field 'weight_map': empty", index_path);
    for (const std::string& s : shard_names) XRT_RETURN_IF_ERROR(AddShard(dir_ + "/" + s));
  } else if (IsFile(single_path)) {
    XRT_RETURN_IF_ERROR(AddShard(single_path));
  } else {
    return xrt::NotFoundError(
        "{}: neither model.safetensors nor model.safetensors.index.json found", dir_);
  }

  for (const SafetensorsFile& f : shards_) {
    for (const SourceTensor& t : f.tensors()) {
      const std::string key = vision_ ? NormalizeLlavaTensorName(t.name) : t.name;
      auto [it, inserted] = tensors_.emplace(key, &t);
      if (!inserted) {
        return xrt::DataLossError("tensor '{}': present as both '{}' ({}) and '{}' ({})", key,
                                  it->second->name, it->second->file, t.name, t.file);
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    auto it = tensors_.find(vision_ ? NormalizeLlavaTensorName(name) : name);
    const std::string shard_path = dir_ + "/" + shard;
    if (it == tensors_.end() || it->second->file != shard_path) {
      return xrt::DataLossError("{}: tensor '{}' is mapped to '{}' but that file does not hold it",
                                index_path, name, shard);
    }
  }
  return Status::Ok();
}

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenHfModelDir(const std::string& dir) {
  auto src = std::make_unique<HfModelSource>();
  XRT_RETURN_IF_ERROR(src->Load(dir));
  return std::unique_ptr<ModelSource>(std::move(src));
}

}  // namespace xcc
