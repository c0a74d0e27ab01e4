// Helpers shared by the fuzz targets in tests/fuzz (xcc_fuzz_support).
//
// Single-threaded use: libFuzzer calls each target from one thread.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_spec.h"

// An invariant of the code under test that the fuzzer checks beyond "no crash": a
// violation aborts with the message, so libFuzzer reports it like a crash.
#define XCC_FUZZ_CHECK(cond, ...)                                                               \
  do {                                                                                          \
    if (!(cond)) ::xrt::fuzz::CheckFailed(#cond, __FILE__, __LINE__, std::string(__VA_ARGS__)); \
  } while (0)

namespace xrt {
namespace fuzz {

[[noreturn]] void CheckFailed(const char* cond, const char* file, int line,
                              const std::string& message);

// Errors are the expected answer to bad input, except kInternal, which the code uses for
// "an invariant of ours does not hold" (runtime/base/status.h): that is a bug.
void CheckNotInternal(const Status& status);

// Builds a Tokenizer from `spec` (an error is fine: invalid specs must be rejected, not
// crash) and, if it builds, encodes `text` with and without special tokens, checks every
// id is in the vocabulary, decodes the ids (keeping and skipping special tokens) and
// streams them through a StreamingDetokenizer, checking it yields the same text as
// Decode.
void ExerciseTokenizer(TokenizerSpec spec, std::string_view text);

// The fuzzer's input bytes as a file, for readers that take a path (GgufFile,
// SafetensorsFile, LoadTokenizerJson). The bytes live in an anonymous memory file
// (memfd_create), so nothing is written to disk; path() names it through /proc/self/fd
// and stays valid until the object is destroyed.

class FuzzInputFile {
 public:
  FuzzInputFile(const uint8_t* data, size_t size) {
    fd_ = memfd_create("fuzz_input", MFD_CLOEXEC);
    if (fd_ < 0) Die("memfd_create");
    size_t done = 0;
    while (done < size) {
      ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) Die("write");
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~FuzzInputFile() { close(fd_); }
  FuzzInputFile(const FuzzInputFile&) = delete;
  FuzzInputFile& operator=(const FuzzInputFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  // A failure of the harness itself, not of the code under test.
  [[noreturn]] static void Die(const char* what) {
    std::perror(what);
    std::abort();
  }

  int fd_ = -1;
  std::string path_;
};

}  // namespace fuzz
}  // namespace xrt
