// libFuzzer target: bytes -> safetensors file (compiler/frontend/safetensors.h). Must never
// crash. A file that opens has every tensor converted to f32: the reader promises each
// tensor's byte size equals numel * itemsize and lies inside the file, so the conversion
// must succeed and read only the file's bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/frontend/safetensors.h"
#include "compiler/frontend/source_dtype.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xrt::fuzz::FuzzInputFile file(data, size);
  auto st = xcc::SafetensorsFile::Open(file.path());
  xrt::fuzz::CheckNotInternal(st.status());
  if (!st.ok()) return 0;
  std::vector<float> out;
  for (const xcc::SourceTensor& t : st->tensors()) {
    auto numel = xcc::ShapeNumel(t.shape);
    XCC_FUZZ_CHECK(numel.ok(), "tensor '" + t.name + "' passed validation with a bad shape");
    out.resize(static_cast<size_t>(*numel));
    xcc::Status s = xcc::ConvertToF32(t.dtype, t.data, t.nbytes, *numel, out.data());
    XCC_FUZZ_CHECK(s.ok(), "tensor '" + t.name + "': " + s.ToString());
  }
  return 0;
}
