#include "compiler/frontend/model_source.h"

#include <sys/stat.h>
#include <cstring>
#include <fstream>

#include "compiler/frontend/gguf_model_source.h"
#include "compiler/frontend/hf_model_source.h"
#include "compiler/frontend/source_dtype.h"

namespace xcc {

Expected<std::unique_ptr<ModelSource>> ModelSource::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return xrt::NotFoundError("{}: cannot open: {}", path, std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return OpenHfModelDir(path);
  if (!S_ISREG(st.st_mode)) {
    return xrt::InvalidArgumentError("{}: neither a model directory nor a regular file", path);
  }
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, 4);
  const bool gguf_magic = in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  const bool gguf_ext = path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
  if (gguf_magic || gguf_ext) return OpenGgufModel(path);
  return xrt::InvalidArgumentError(
      "{}: unrecognized model: expected a Hugging Face model directory (config.json + "
      "safetensors) or a GGUF file",
      path);
}

std::vector<std::string> IndexedModelSource::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& kv : tensors_) names.push_back(kv.first);
  return names;
}

Expected<const SourceTensor*> IndexedModelSource::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return xrt::NotFoundError("tensor '{}': not found in {}", name, origin_);
  return it->second;
}

Expected<std::vector<float>> ModelSource::ReadF32(const std::string& name) const {
  XRT_ASSIGN_OR_RETURN(const SourceTensor* t, tensor(name));
  XRT_ASSIGN_OR_RETURN(int64_t n, ShapeNumel(t->shape));
  std::vector<float> out(static_cast<size_t>(n));
  XRT_RETURN_IF_ERROR(ConvertToF32(t->dtype, t->data, t->nbytes, n, out.data())
                          .WithContext(fmt::format("{}: tensor '{}'", t->file, name)));
  return out;
}

}  // namespace xcc
