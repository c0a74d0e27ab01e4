#include "runtime/server/media_fetcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/base/json_parse.h"
#include "runtime/server/openai_protocol.h"

namespace xrt {
namespace server {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxImageLimit = 1000000;

// A URL as shown in an error: data URLs hold the image itself, so long ones
// are cut.
std::string Shown(std::string_view url) {
  constexpr size_t kMax = 96;
  if (url.size() <= kMax) return std::string(url);
  return std::string(url.substr(0, kMax)) + "...";
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Standard base64 (RFC 4648 section 4); padding optional, ASCII whitespace
// skipped. Decodes at most `max_bytes` bytes.
Expected<std::string> DecodeBase64(std::string_view in, int64_t max_bytes) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(std::min<size_t>(in.size() / 4 * 3 + 3, static_cast<size_t>(max_bytes) + 3));
  uint32_t acc = 0;
  int bits = 0, symbols = 0, padding = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const int v = value(c);
    if (v < 0)
      return InvalidArgumentError("invalid base64 in the data URL: character '{}' at offset {}",
                                  fmt::format("{:c}", c), i);
    if (padding > 0)
      return InvalidArgumentError("invalid base64 in the data URL: data after '=' at offset {}", i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    ++symbols;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
      if (static_cast<int64_t>(out.size()) > max_bytes)
        return InvalidArgumentError("the image is larger than the limit of {} bytes", max_bytes);
    }
  }
  // 4n symbols, or 4n + 2 / 4n + 3 with (optionally) the padding that completes them.
  const int tail = symbols % 4;
  if (tail == 1 || (padding > 0 && tail + padding != 4) || padding > 2)
    return InvalidArgumentError("invalid base64 in the data URL: truncated ({} symbols{})", symbols,
                                padding > 0 ? fmt::format(", {} '='", padding) : "");
  if (out.empty()) return InvalidArgumentError("the data URL holds no data");
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "%2F" -> "/"; a malformed escape or an encoded NUL is an error.
Expected<std::string> PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    const int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? HexValue(s[i + 2]) : -1;
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
      return InvalidArgumentError("bad percent-escape at offset {} of the path", i);
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

// "/a/./b/../c" -> "/a/c", without touching the file system.
std::string LexicallyNormal(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(std::move(part));
    }
    i = j + 1;
  }
  std::string out;
  for (const std::string& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

bool IsBelow(const std::string& path, const std::string& root) {
  if (root == "/") return path.size() > 1 && path[0] == '/';
  return path.size() > root.size() + 1 && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

Expected<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    const int err = errno;
    return InvalidArgumentError("{}", std::strerror(err));
  }
  return std::string(buf);
}

// The parts of an http(s) URL that the request needs.
struct HttpUrl {
  bool https = false;
  std::string host;
  int port = 0;
  std::string target;  // path and query, "/" at least
};

Expected<HttpUrl> ParseHttpUrl(std::string_view url) {
  HttpUrl out;
  size_t rest;
  if (StartsWithNoCase(url, "http://")) {
    rest = 7;
  } else if (StartsWithNoCase(url, "https://")) {
    out.https = true;
    rest = 8;
  } else {
    return InvalidArgumentError("'{}' is not an http(s) URL", Shown(url));
  }
  std::string_view s = url.substr(rest);
  s = s.substr(0, s.find('#'));
  const size_t end = s.find_first_of("/?");
  std::string_view authority = s.substr(0, end);
  out.target = end == std::string_view::npos ? "/" : std::string(s.substr(end));
  if (out.target[0] == '?') out.target = "/" + out.target;
  if (authority.find('@') != std::string_view::npos)
    return InvalidArgumentError("credentials in image URLs are not supported: '{}'", Shown(url));
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return InvalidArgumentError("bad host in the URL '{}'", Shown(url));
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return InvalidArgumentError("bad host in the URL '{}'", Shown(url));
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) return InvalidArgumentError("the URL '{}' has no host", Shown(url));
  out.port = out.https ? 443 : 80;
  if (!port.empty()) {
    int p = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || p > 65535) {
        p = -1;
        break;
      }
      p = p * 10 + (c - '0');
    }
    if (p < 1 || p > 65535) return InvalidArgumentError("bad port in the URL '{}'", Shown(url));
    out.port = p;
  }
  return out;
}

// The URL a redirect's Location points to, relative to `base`.
std::string ResolveLocation(const HttpUrl& base, const std::string& location) {
  const std::string origin = fmt::format(
      "{}://{}:{}", base.https ? "https" : "http",
      base.host.find(':') != std::string::npos ? "[" + base.host + "]" : base.host, base.port);
  const size_t colon = location.find(':');
  const size_t slash = location.find('/');
  if (colon != std::string::npos && (slash == std::string::npos || colon < slash))
    return location;  // absolute, with a scheme
  if (location.rfind("//", 0) == 0) return (base.https ? "https:" : "http:") + location;
  if (!location.empty() && location[0] == '/') return origin + location;
  // Relative to the directory of the current path, dot segments removed.
  std::string dir = base.target.substr(0, base.target.find('?'));
  dir = dir.substr(0, dir.rfind('/') + 1);
  const size_t query = location.find('?');
  const std::string path = LexicallyNormal(dir + location.substr(0, query));
  return origin + path + (query == std::string::npos ? "" : location.substr(query));
}

}  // namespace

Expected<int> ParseImageLimit(std::string_view text) {
  const std::string t = Trim(text);
  auto count = [&](const std::string& s) -> Expected<int> {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || v < 0 || v > kMaxImageLimit)
      return InvalidArgumentError(
          "--limit-mm-per-prompt: '{}' is not an image count in [0, {}] (forms: 4, image=4, "
          "{{\"image\": 4}})",
          t, kMaxImageLimit);
    return static_cast<int>(v);
  };
  if (!t.empty() && t[0] == '{') {
    nlohmann::json j = ParseJsonBounded(t);
    if (!j.is_object())
      return InvalidArgumentError("--limit-mm-per-prompt: '{}' is not a JSON object", t);
    int limit = -1;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "image")
        return InvalidArgumentError(
            "--limit-mm-per-prompt: modality '{}' is not supported (only image)", it.key());
      if (!it->is_number_integer())
        return InvalidArgumentError("--limit-mm-per-prompt: 'image' must be an integer");
      XRT_ASSIGN_OR_RETURN(limit, count(std::to_string(it->get<int64_t>())));
    }
    if (limit < 0) return InvalidArgumentError("--limit-mm-per-prompt: '{}' has no 'image'", t);
    return limit;
  }
  const size_t eq = t.find('=');
  if (eq != std::string::npos) {
    const std::string key = Trim(std::string_view(t).substr(0, eq));
    if (key != "image")
      return InvalidArgumentError(
          "--limit-mm-per-prompt: modality '{}' is not supported (only image)", key);
    return count(Trim(std::string_view(t).substr(eq + 1)));
  }
  return count(t);
}

Expected<MediaFetcher> MediaFetcher::Create(MediaFetchParams params) {
  if (params.limit_images_per_prompt < 0)
    return InvalidArgumentError("--limit-mm-per-prompt must be >= 0, got {}",
                                params.limit_images_per_prompt);
  if (params.max_image_bytes < 1)
    return InvalidArgumentError("the media byte limit must be >= 1, got {}",
                                params.max_image_bytes);
  if (!(params.timeout_seconds > 0) || !std::isfinite(params.timeout_seconds))
    return InvalidArgumentError("the media fetch timeout must be > 0 seconds, got {}",
                                params.timeout_seconds);
  if (params.max_redirects < 0)
    return InvalidArgumentError("the media redirect limit must be >= 0, got {}",
                                params.max_redirects);
  std::string root;
  if (!params.allowed_local_media_path.empty()) {
    Expected<std::string> real = RealPath(params.allowed_local_media_path);
    if (!real.ok())
      return InvalidArgumentError("--allowed-local-media-path '{}': {}",
                                  params.allowed_local_media_path, real.status().message());
    struct stat st;
    if (::stat(real->c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return InvalidArgumentError("--allowed-local-media-path '{}' is not a directory",
                                  params.allowed_local_media_path);
    root = *real;
  }
  MediaFetcher f(std::move(params));
  f.allowed_root_ = std::move(root);
  return f;
}

Expected<FetchedMedia> MediaFetcher::Fetch(std::string_view url) const {
  if (StartsWithNoCase(url, "data:")) return FetchData(url);
  if (StartsWithNoCase(url, "http://") || StartsWithNoCase(url, "https://")) return FetchHttp(url);
  if (StartsWithNoCase(url, "file:")) return FetchFile(url);
  return InvalidArgumentError("the image URL must be a data:, http(s):// or file:// URL, got '{}'",
                              Shown(url));
}

Expected<FetchedMedia> MediaFetcher::FetchData(std::string_view url) const {
  // data:[<media type>][;<param>=<value>]*[;base64],<data> (RFC 2397).
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos)
    return InvalidArgumentError("the data URL has no ',' before its data");
  std::string_view spec = url.substr(5, comma - 5);
  const size_t semi = spec.rfind(';');
  if (semi == std::string_view::npos || Lower(spec.substr(semi + 1)) != "base64")
    return InvalidArgumentError("only base64 data URLs are supported (data:image/...;base64,...)");
  FetchedMedia out;
  out.media_type = Lower(Trim(spec.substr(0, spec.find(';'))));
  if (out.media_type.rfind("image/", 0) != 0 || out.media_type.size() == 6)
    return InvalidArgumentError("the data URL's media type must be image/*, got '{}'",
                                out.media_type);
  std::string_view data = url.substr(comma + 1);
  // Base64 grows data by 4/3: refuse clearly oversized payloads before decoding.
  if (static_cast<int64_t>(data.size() / 4) * 3 > params_.max_image_bytes + 3)
    return InvalidArgumentError("the image is larger than the limit of {} bytes",
                                params_.max_image_bytes);
  XRT_ASSIGN_OR_RETURN(out.bytes, DecodeBase64(data, params_.max_image_bytes));
  return out;
}

Expected<FetchedMedia> MediaFetcher::FetchHttp(std::string_view first_url) const {
  const auto budget = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(params_.timeout_seconds));
  const Clock::time_point deadline = Clock::now() + budget;
  const int64_t max_bytes = params_.max_image_bytes;
  std::string url(first_url);
  for (int redirects = 0;; ++redirects) {
    XRT_ASSIGN_OR_RETURN(HttpUrl target, ParseHttpUrl(url));
    std::unique_ptr<httplib::ClientImpl> client;
    if (target.https) {
      client = std::make_unique<httplib::SSLClient>(target.host, target.port);
    } else {
      client = std::make_unique<httplib::ClientImpl>(target.host, target.port);
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      return InvalidArgumentError("fetching '{}' timed out after {} s", Shown(first_url),
                                  params_.timeout_seconds);
    const time_t sec = static_cast<time_t>(left.count() / 1000000);
    const time_t usec = static_cast<time_t>(left.count() % 1000000);
    client->set_connection_timeout(sec, usec);
    client->set_read_timeout(sec, usec);
    client->set_write_timeout(sec, usec);
    client->set_follow_location(false);
    client->set_keep_alive(false);
    client->set_decompress(false);  // the limit counts the bytes received

    // Why the handlers stopped the transfer, if they did.
    enum class Stop { kNone, kStatus, kTooLarge, kTimeout } stop = Stop::kNone;
    int status = 0;
    std::string location, content_type, body;
    auto on_response = [&](const httplib::Response& r) {
      status = r.status;
      if (r.status >= 300 && r.status < 400 && r.has_header("Location")) {
        location = r.get_header_value("Location");
        stop = Stop::kStatus;
        return false;
      }
      if (r.status < 200 || r.status >= 300) {
        stop = Stop::kStatus;
        return false;
      }
      content_type = r.get_header_value("Content-Type");
      if (r.has_header("Content-Length")) {
        const std::string len = r.get_header_value("Content-Length");
        char* end = nullptr;
        const unsigned long long n = std::strtoull(len.c_str(), &end, 10);
        if (end != len.c_str() && n > static_cast<unsigned long long>(max_bytes)) {
          stop = Stop::kTooLarge;
          return false;
        }
      }
      return true;
    };
    auto on_data = [&](const char* data, size_t n) {
      if (static_cast<int64_t>(body.size() + n) > max_bytes) {
        stop = Stop::kTooLarge;
        return false;
      }
      body.append(data, n);
      if (Clock::now() > deadline) {
        stop = Stop::kTimeout;
        return false;
      }
      return true;
    };
    httplib::Result res =
        client->Get(target.target, httplib::Headers{{"Accept", "image/*"}}, on_response, on_data);
    if (stop == Stop::kTooLarge)
      return InvalidArgumentError("the image at '{}' is larger than the limit of {} bytes",
                                  Shown(first_url), max_bytes);
    if (stop == Stop::kTimeout)
      return InvalidArgumentError("fetching '{}' timed out after {} s", Shown(first_url),
                                  params_.timeout_seconds);
    if (stop == Stop::kStatus && !location.empty()) {
      if (redirects >= params_.max_redirects)
        return InvalidArgumentError("fetching '{}': more than {} redirects", Shown(first_url),
                                    params_.max_redirects);
      std::string next = ResolveLocation(target, location);
      if (!StartsWithNoCase(next, "http://") && !StartsWithNoCase(next, "https://"))
        return InvalidArgumentError("fetching '{}': redirected to '{}', which is not http(s)",
                                    Shown(first_url), Shown(next));
      url = std::move(next);
      continue;
    }
    if (stop == Stop::kStatus)
      return InvalidArgumentError("fetching '{}': HTTP {}{}", Shown(first_url), status,
                                  url != first_url ? fmt::format(" from '{}'", Shown(url)) : "");
    if (!res) {
      const httplib::Error err = res.error();
      if (err == httplib::Error::Read || err == httplib::Error::ConnectionTimeout) {
        if (Clock::now() + std::chrono::milliseconds(50) >= deadline)
          return InvalidArgumentError("fetching '{}' timed out after {} s", Shown(first_url),
                                      params_.timeout_seconds);
      }
      return InvalidArgumentError("fetching '{}' failed: {}", Shown(first_url),
                                  httplib::to_string(err));
    }
    FetchedMedia out;
    out.bytes = std::move(body);
    out.media_type = Lower(Trim(content_type.substr(0, content_type.find(';'))));
    if (out.bytes.empty())
      return InvalidArgumentError("fetching '{}': the response is empty", Shown(first_url));
    return out;
  }
}

Expected<FetchedMedia> MediaFetcher::FetchFile(std::string_view url) const {
  if (allowed_root_.empty())
    return InvalidArgumentError(
        "file:// image URLs are disabled; start the server with --allowed-local-media-path DIR "
        "to serve files below DIR");
  if (!StartsWithNoCase(url, "file://"))
    return InvalidArgumentError("a file URL must be file:///absolute/path, got '{}'", Shown(url));
  std::string_view rest = url.substr(7);
  rest = rest.substr(0, rest.find_first_of("?#"));
  const size_t slash = rest.find('/');
  const std::string host = Lower(rest.substr(0, slash));
  if (slash == std::string_view::npos || (!host.empty() && host != "localhost"))
    return InvalidArgumentError(
        "a file URL must be file:///absolute/path (host empty or localhost), got '{}'", Shown(url));
  XRT_ASSIGN_OR_RETURN(std::string path, PercentDecode(rest.substr(slash)));
  const auto outside = [&](const std::string& p) {
    return InvalidArgumentError("the file '{}' is not below --allowed-local-media-path '{}'", p,
                                allowed_root_);
  };
  Expected<std::string> real = RealPath(path);
  if (!real.ok()) {
    // Say "outside" for what lies outside even when it does not exist, so
    // that requests cannot probe the file system beyond the allowed path.
    if (!IsBelow(LexicallyNormal(path), allowed_root_)) return outside(path);
    return InvalidArgumentError("cannot open the file '{}': {}", path, real.status().message());
  }
  if (!IsBelow(*real, allowed_root_)) return outside(path);

  const int fd = ::open(real->c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    return InvalidArgumentError("cannot open the file '{}': {}", path, std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  // The check again on what was opened: a path component swapped for a
  // symlink after realpath cannot lead outside.
  char opened[PATH_MAX];
  const std::string self = fmt::format("/proc/self/fd/{}", fd);
  const ssize_t n = ::readlink(self.c_str(), opened, sizeof(opened) - 1);
  if (n <= 0 || !IsBelow(std::string(opened, static_cast<size_t>(n)), allowed_root_))
    return outside(path);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return InvalidArgumentError("'{}' is not a regular file", path);
  if (st.st_size > params_.max_image_bytes)
    return InvalidArgumentError("the file '{}' is larger than the limit of {} bytes", path,
                                params_.max_image_bytes);
  FetchedMedia out;
  out.bytes.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.bytes.size()) {
    const ssize_t got = ::read(fd, out.bytes.data() + done, out.bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      return InvalidArgumentError("cannot read the file '{}': {}", path, std::strerror(err));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  out.bytes.resize(done);
  if (out.bytes.empty()) return InvalidArgumentError("the file '{}' is empty", path);
  return out;
}

Expected<std::vector<FetchedMedia>> FetchRequestImages(const OpenAiRequest& request,
                                                       const MediaFetcher& fetcher,
                                                       std::string* out_param) {
  const int limit = fetcher.params().limit_images_per_prompt;
  const std::vector<ImagePart>& images = request.images;
  if (static_cast<int>(images.size()) > limit) {
    const ImagePart& first_over = images[static_cast<size_t>(limit)];
    if (out_param) *out_param = first_over.Field();
    return InvalidArgumentError(
        "{}: at most {} image(s) may be provided in one request (--limit-mm-per-prompt); this "
        "one has {}",
        first_over.Field(), limit, images.size());
  }
  std::vector<FetchedMedia> out;
  out.reserve(images.size());
  for (const ImagePart& image : images) {
    Expected<FetchedMedia> got = fetcher.Fetch(image.url);
    if (!got.ok()) {
      if (out_param) *out_param = image.Field();
      return got.status().WithContext(image.Field());
    }
    out.push_back(std::move(got).value());
  }
  return out;
}

}  // namespace server
}  // namespace xrt
