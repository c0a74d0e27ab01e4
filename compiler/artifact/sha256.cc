#include "compiler/artifact/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <openssl/evp.h>

namespace xcc {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

xrt::Expected<MdCtx> NewSha256(const std::string& what) {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return xrt::InternalError("{}: cannot initialize SHA-256", what);
  }
  return ctx;
}

xrt::Expected<std::string> FinishHex(EVP_MD_CTX* ctx, const std::string& what) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &len) != 1) {
    return xrt::InternalError("{}: SHA-256 finalization failed", what);
  }
  static const char k_hex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    hex += k_hex[digest[i] >> 4];
    hex += k_hex[digest[i] & 0xf];
  }
  return hex;
}

}  // namespace

xrt::Expected<std::string> Sha256Bytes(const void* data, size_t size) {
  XRT_ASSIGN_OR_RETURN(MdCtx ctx, NewSha256("sha256"));
  if (size > 0 && EVP_DigestUpdate(ctx.get(), data, size) != 1) {
    return xrt::InternalError("sha256: digest update failed");
  }
  return FinishHex(ctx.get(), "sha256");
}

xrt::Expected<std::string> Sha256File(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return xrt::NotFoundError("{}: cannot open: {}", path, std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  XRT_ASSIGN_OR_RETURN(MdCtx ctx, NewSha256(path));
  std::vector<unsigned char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return xrt::UnavailableError("{}: read failed: {}", path, std::strerror(errno));
    }
    if (n == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n)) != 1) {
      return xrt::InternalError("{}: SHA-256 update failed", path);
    }
  }
  return FinishHex(ctx.get(), path);
}

}  // namespace xcc
