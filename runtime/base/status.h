// Status and Expected<T>: the error channel of the runtime and of the plain-C++
// parts of the compiler (frontends, artifact writer).
//
// Every call that can fail returns a Status or an Expected<T>. Both are
// [[nodiscard]]; the message is meant for a person and names what was wrong
// (the file, the field, the value), e.g.
//   "model.safetensors: tensor 'lm_head.weight': data offsets [10, 4) out of order".
// No exceptions cross these APIs.
#pragma once

#include <cassert>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace xrt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed something wrong (a flag, a request)
  kNotFound,            // a file, tensor, key that should exist does not
  kDataLoss,            // a file is corrupt or truncated
  kUnimplemented,       // valid input we do not support (an architecture, a dtype)
  kOutOfRange,          // an index or size beyond a limit
  kResourceExhausted,   // memory, KV blocks, slots
  kFailedPrecondition,  // the object is in the wrong state for the call
  kInternal,            // a bug: an invariant of ours does not hold
  kUnavailable,         // an OS resource could not be had (mmap, dlopen)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "<CodeName>: <message>", for printing.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status MakeStatus(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
#define XRT_DEFINE_ERROR_FACTORY(Name, Code)                                      \
  template <typename... Args>                                                     \
  Status Name(fmt::format_string<Args...> f, Args&&... args) {                    \
    return Status(StatusCode::Code, fmt::format(f, std::forward<Args>(args)...)); \
  }
XRT_DEFINE_ERROR_FACTORY(InvalidArgumentError, kInvalidArgument)
XRT_DEFINE_ERROR_FACTORY(NotFoundError, kNotFound)
XRT_DEFINE_ERROR_FACTORY(DataLossError, kDataLoss)
XRT_DEFINE_ERROR_FACTORY(UnimplementedError, kUnimplemented)
XRT_DEFINE_ERROR_FACTORY(OutOfRangeError, kOutOfRange)
XRT_DEFINE_ERROR_FACTORY(ResourceExhaustedError, kResourceExhausted)
XRT_DEFINE_ERROR_FACTORY(FailedPreconditionError, kFailedPrecondition)
XRT_DEFINE_ERROR_FACTORY(InternalError, kInternal)
XRT_DEFINE_ERROR_FACTORY(UnavailableError, kUnavailable)
#undef XRT_DEFINE_ERROR_FACTORY

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Expected built from an OK status");
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  const Status& status() const {
    static const Status k_ok;
    return ok() ? k_ok : std::get<Status>(v_);
  }

  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

#define XRT_CONCAT_INNER_(a, b) a##b
#define XRT_CONCAT_(a, b) XRT_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define XRT_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::xrt::Status xrt_status_ = (expr);        \
    if (!xrt_status_.ok()) return xrt_status_; \
  } while (0)

// `lhs` = value of `expr` (an Expected<T>), or returns its status.
#define XRT_ASSIGN_OR_RETURN(lhs, expr) \
  XRT_ASSIGN_OR_RETURN_IMPL_(XRT_CONCAT_(xrt_expected_, __LINE__), lhs, expr)
#define XRT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

}  // namespace xrt
