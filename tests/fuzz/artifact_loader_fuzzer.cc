// libFuzzer target: bytes -> xrt::Artifact (runtime/loader). Loading must never crash on
// any input; an artifact that loads must be safe to use through every accessor (the
// loader's promise, runtime/loader/artifact.h): the fuzzer touches the first and last
// byte of every segment and weight (ASan catches a range outside the copy), looks up
// every weight and executable by name, kind and bucket, prints the manifest as text and
// JSON (`xcc inspect`), and builds and runs the tokenizer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/loader/artifact.h"
#include "runtime/loader/manifest_printer.h"
#include "schemas/artifact_generated.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

volatile uint8_t g_sink;

void Touch(const xrt::ByteSpan& span) {
  if (span.size == 0) return;
  g_sink = span.data[0];
  g_sink = span.data[span.size - 1];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto loaded = xrt::Artifact::FromBytes("fuzz.xpk", data, size);
  xrt::fuzz::CheckNotInternal(loaded.status());
  if (!loaded.ok()) return 0;
  const xrt::Artifact& a = **loaded;

  for (uint32_t i = 0; i < a.num_segments(); ++i) {
    auto seg = a.segment_data(i);
    XCC_FUZZ_CHECK(seg.ok(), seg.status().ToString());
    Touch(*seg);
  }
  XCC_FUZZ_CHECK(!a.segment_data(a.num_segments()).ok(), "segment index past the end");
  for (uint32_t i = 0; i < a.num_weights(); ++i) {
    auto w = a.weight(i);
    auto bytes = a.weight_data(i);
    XCC_FUZZ_CHECK(w.ok() && bytes.ok(), "weight " + std::to_string(i));
    Touch(*bytes);
    auto found = a.FindWeight((*w)->name()->string_view());
    XCC_FUZZ_CHECK(found.ok() && *found == i, "FindWeight of weight " + std::to_string(i));
  }
  XCC_FUZZ_CHECK(!a.weight_data(a.num_weights()).ok(), "weight index past the end");

  const xpk::Manifest& m = a.manifest();
  for (uint32_t i = 0; m.executables() && i < m.executables()->size(); ++i) {
    const xpk::Executable* e = m.executables()->Get(i);
    auto by_name = a.FindExecutable(e->name()->string_view());
    XCC_FUZZ_CHECK(by_name.ok() && *by_name == e, "FindExecutable by name");
    const int64_t bucket = xrt::ExecutableBucket(*e);
    auto by_bucket = a.FindExecutable(e->kind(), bucket, e->lora_mode());
    XCC_FUZZ_CHECK(by_bucket.ok() && *by_bucket == e,
                   "FindExecutable by bucket " + std::to_string(bucket));
    auto covering = a.FindCoveringExecutable(e->kind(), bucket, e->lora_mode());
    XCC_FUZZ_CHECK(covering.ok() && xrt::ExecutableBucket(**covering) == bucket,
                   "FindCoveringExecutable " + std::to_string(bucket));
    (void)a.FindCoveringExecutable(e->kind(), bucket + 1, e->lora_mode());
  }

  (void)xrt::ManifestToText(a);
  (void)xrt::ManifestToJson(a).dump();
  (void)a.provenance();

  auto spec = a.tokenizer_spec();
  xrt::fuzz::CheckNotInternal(spec.status());
  if (spec.ok()) {
    xrt::fuzz::ExerciseTokenizer(
        std::move(*spec),
        "Hello, world! 12345 <|im_start|>user\nh\xc3\xa9llo \xf0\x9f\x98\x80<s></s>");
  }
  return 0;
}
