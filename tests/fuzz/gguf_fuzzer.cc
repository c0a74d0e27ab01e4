// libFuzzer target: bytes -> GGUF file (compiler/frontend/gguf_file.h), then, when the file
// is well formed, the GGUF model frontend on it (gguf_model_source.h: config, tokenizer
// from the tokenizer.ggml.* metadata, name mapping, q/k un-permutation). Must never crash.
// A file that opens is exercised through every typed metadata getter, and every tensor is
// dequantized to f32 (the reader's byte size must agree with what the converter reads);
// a model that opens has its tokenizer built and run, and every tensor read with ReadF32.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/frontend/gguf_file.h"
#include "compiler/frontend/gguf_model_source.h"
#include "compiler/frontend/source_dtype.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void ExerciseMetadata(const xcc::GgufFile& f) {
  for (const auto& [key, value] : f.metadata()) {
    (void)f.GetInt(key);
    (void)f.GetFloat(key);
    (void)f.GetBool(key);
    (void)f.GetString(key);
    (void)f.GetStringArray(key);
    (void)f.GetIntArray(key);
  }
}

void ExerciseTensors(const xcc::GgufFile& f) {
  std::vector<float> out;
  for (const xcc::GgufTensorInfo& t : f.tensors()) {
    auto numel = xcc::ShapeNumel(t.ne);
    XCC_FUZZ_CHECK(numel.ok(), "tensor '" + t.name + "' passed validation with a bad shape");
    out.resize(static_cast<size_t>(*numel));
    xcc::Status s = xcc::ConvertToF32(t.dtype, t.data, t.nbytes, *numel, out.data());
    XCC_FUZZ_CHECK(s.ok(), "tensor '" + t.name + "': " + s.ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xrt::fuzz::FuzzInputFile file(data, size);
  auto gguf = xcc::GgufFile::Open(file.path());
  xrt::fuzz::CheckNotInternal(gguf.status());
  if (!gguf.ok()) return 0;
  ExerciseMetadata(*gguf);
  ExerciseTensors(*gguf);

  auto model = xcc::OpenGgufModel(file.path());
  xrt::fuzz::CheckNotInternal(model.status());
  if (!model.ok()) return 0;
  const xcc::ModelSource& m = **model;
  xrt::fuzz::ExerciseTokenizer(m.tokenizer(), "Hello, world! 12345\n<|im_start|>h\xc3\xa9llo");
  for (const std::string& name : m.tensor_names()) {
    auto t = m.tensor(name);
    XCC_FUZZ_CHECK(t.ok(), "tensor_names lists '" + name + "' but tensor() fails");
    auto f32 = m.ReadF32(name);
    XCC_FUZZ_CHECK(f32.ok(), "ReadF32 '" + name + "': " + f32.status().ToString());
  }
  return 0;
}
