// Artifact: a loaded, validated .xpk file (schemas/artifact.fbs, docs/DESIGN.md §3).
//
// Loading is validating. Open() maps the file and checks, in layers:
//   1. the fixed header (file_header.h): magic, major version, sizes, manifest range;
//   2. the flatbuffer: file identifier "XPK1", then the flatbuffers Verifier;
//   3. the manifest's contents: format_major, config, tokenizer, serving limits, every
//      segment (in the file, aligned, not overlapping the header, the manifest or each
//      other), every weight (in its segment, aligned, byte size consistent with dtype,
//      shape and layout), every code module, every executable (tensor specs inside the
//      io buffer, every command and binding in range: arena, io, weights, KV layers;
//      ukernel argument counts as documented in artifact.fbs), every segment's checksum
//      fields well formed and present (format 1.1+);
//   4. the checksum of every code segment (segment_checksum.h), so generated code that
//      was corrupted on disk is never loaded. Weights are not hashed here (that would read
//      the whole file at every start): VerifySegment() does it on request.
// After Open() succeeds every offset and index in the manifest has been checked, so
// accessors that take an index validated here cannot read outside the file. A corrupt
// or truncated file gives a Status naming the file and the item, never a crash.
//
// Ownership and lifetime: an Artifact owns its mapping (or its copy of the bytes).
// manifest(), the xpk::* pointers and the data pointers returned by the accessors point
// into it and stay valid until the Artifact is destroyed.
//
// Thread-safety: immutable after Open(); all methods are const and may be called
// concurrently from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/base/mapped_file.h"
#include "runtime/base/status.h"
#include "runtime/kernels/weight_format.h"
#include "runtime/loader/file_header.h"
#include "runtime/tokenizer/tokenizer_spec.h"

// Generated types (schemas/artifact_generated.h); include that header to use them.
namespace xpk {
struct Manifest;
struct Weight;
struct Executable;
struct CodeModule;
enum class DType : uint8_t;
enum class ExecutableKind : uint8_t;
enum class LoraMode : uint8_t;
}  // namespace xpk

namespace xrt {

// A read-only byte range inside an artifact.
struct ByteSpan {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// Provenance of an artifact as plain data (empty fields when the manifest has none).
struct ArtifactProvenance {
  struct Input {
    std::string path;
    std::string role;
    uint64_t size = 0;
    std::string sha256;
  };
  std::string compiler_version;
  std::string llvm_version;
  std::vector<std::pair<std::string, std::string>> options;  // as stored (sorted by key)
  std::vector<Input> inputs;                                 // as stored (sorted by path)
};

// How Artifact::Open brings the file into memory (runtime/base/mapped_file.h):
// kMap maps it in place (pages read on first touch, shared through the page
// cache); kRead reads it whole into a private copy on transparent huge pages,
// which a decode step reading all the weights streams faster.
enum class ArtifactLoad { kMap, kRead };

class Artifact {
 public:
  // Maps (or reads) `path` read-only and validates it. Errors start with `path`.
  static Expected<std::unique_ptr<Artifact>> Open(const std::string& path,
                                                  ArtifactLoad load = ArtifactLoad::kMap);

  // Validates an artifact held in memory. The bytes are copied into page-aligned storage
  // owned by the Artifact (so alignment checks mean the same as for a mapped file).
  // `name` stands for the file in error messages. Meant for tests and tools.
  static Expected<std::unique_ptr<Artifact>> FromBytes(const std::string& name, const uint8_t* data,
                                                       size_t size);

  Artifact(const Artifact&) = delete;
  Artifact& operator=(const Artifact&) = delete;
  ~Artifact();

  // The path given to Open() (or the name given to FromBytes()).
  const std::string& path() const { return path_; }
  const FileHeader& header() const { return header_; }
  // The whole file.
  ByteSpan file_bytes() const { return {data_, size_}; }
  // The verified manifest; lives as long as the Artifact.
  const xpk::Manifest& manifest() const { return *manifest_; }

  // ArtifactLoad::kRead: the bytes of the copy on huge pages now (0 for kMap, for
  // FromBytes, and where the kernel granted none).
  size_t HugePageBytes() const { return file_.HugePageBytes(); }
  // Whether Open() read the file into a copy (ArtifactLoad::kRead).
  bool is_copy() const { return file_.is_copy(); }

  // Segments: OutOfRange error for an index >= num_segments().
  uint32_t num_segments() const;
  Expected<ByteSpan> segment_data(uint32_t index) const;
  // Recomputes segment `index`'s checksum over its bytes in the file and compares it with
  // the manifest's (reads the whole segment). Ok when they match; DataLoss naming the file,
  // the segment, its range and the expected and actual digests when they differ;
  // FailedPrecondition when the segment has no checksum (format 1.0 artifacts);
  // OutOfRange for an index >= num_segments().
  Status VerifySegment(uint32_t index) const;

  // Weights (Manifest.weights). weight_data() is the weight's bytes, in place in the file
  // and 64-byte aligned; OutOfRange for an index >= num_weights().
  uint32_t num_weights() const;
  Expected<const xpk::Weight*> weight(uint32_t index) const;
  Expected<ByteSpan> weight_data(uint32_t index) const;
  // Index of the weight named `name`; NotFound if there is none (names are unique).
  Expected<uint32_t> FindWeight(std::string_view name) const;

  // Executables by name (unique), or by kind + exact bucket + LoRA mode. The bucket of
  // an executable is num_tokens (lm_step), num_reqs (lm_logits) or num_images
  // (vision_encode); (kind, lora_mode, bucket) is unique in a valid artifact.
  Expected<const xpk::Executable*> FindExecutable(std::string_view name) const;
  Expected<const xpk::Executable*> FindExecutable(xpk::ExecutableKind kind, int64_t bucket,
                                                  xpk::LoraMode lora_mode) const;
  // The smallest bucket of `kind`/`lora_mode` that holds `n` (bucket >= n); NotFound
  // (naming the largest compiled bucket) when none does.
  Expected<const xpk::Executable*> FindCoveringExecutable(xpk::ExecutableKind kind, int64_t n,
                                                          xpk::LoraMode lora_mode) const;
  // Executables of `kind` and `lora_mode`, by increasing bucket.
  std::vector<const xpk::Executable*> ExecutablesOfKind(xpk::ExecutableKind kind,
                                                        xpk::LoraMode lora_mode) const;

  // The tokenizer as a TokenizerSpec (copies the vocabulary and merges).
  Expected<TokenizerSpec> tokenizer_spec() const;
  ArtifactProvenance provenance() const;

 private:
  Artifact() = default;
  static Expected<std::unique_ptr<Artifact>> Validate(std::unique_ptr<Artifact> a);
  Status BuildIndexes();

  std::string path_;
  MappedFile file_;           // set by Open()
  uint8_t* owned_ = nullptr;  // set by FromBytes(); freed in the destructor
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  FileHeader header_;
  const xpk::Manifest* manifest_ = nullptr;
  std::unordered_map<std::string_view, uint32_t> weight_by_name_;
  std::unordered_map<std::string_view, uint32_t> executable_by_name_;
};

// Bucket parameter of an executable (see FindExecutable).
int64_t ExecutableBucket(const xpk::Executable& e);

// Bytes per element of a manifest dtype (0 for a value outside the enum and
// for the block-quantized dtypes, which have no per-element size).
uint64_t DTypeSize(xpk::DType dtype);

// A dtype's name ("f32", "q4_1"), or "dtype <value>" for a value outside the enum.
std::string DTypeName(xpk::DType dtype);

// The matmul weight format stored as `dtype` in a packed_panels weight; false if
// the dtype cannot be a packed weight (integers, values outside the enum).
bool WeightFormatOf(xpk::DType dtype, WeightFormat* out);

}  // namespace xrt
