// MediaFetcher: resolves the URL of an image content part to its bytes, with
// limits, as vLLM's MediaConnector does (the bytes are decoded elsewhere, by
// the vision runtime):
//
//   data:<media type>[;params];base64,<data>
//       The media type must be image/*; only base64 data (standard alphabet,
//       padding optional, ASCII whitespace skipped) is supported.
//   http://... and https://...
//       GET with cpp-httplib: the whole fetch, redirects included, must end
//       within `timeout_seconds` (connect and every read are bounded by what
//       is left, so a server that stalls mid-body is cut off at the next read
//       at the latest); the body is read as it arrives and abandoned once it
//       passes `max_image_bytes` (a Content-Length above it is refused before
//       any body is read); 3xx responses are followed by hand, at most
//       `max_redirects` of them, and only to http(s). Any status other than
//       2xx is an error. https uses OpenSSL (Debian's cpp-httplib is built
//       with it) and verifies the server's certificate against the system CA
//       store.
//   file:///absolute/path (or file://localhost/...)
//       Only when `allowed_local_media_path` is set (as vLLM's
//       --allowed-local-media-path; disabled by default), and only for regular
//       files whose real path (symlinks and ".." resolved) lies below it. The
//       check is made on the file actually opened, so a symlink swapped in
//       after the check cannot escape.
//
// Every failure is InvalidArgument (-> HTTP 400) with a message stating the
// reason; FetchRequestImages prefixes it with the part
// ("messages[0].content[1]: HTTP 404 from http://...").
//
// Thread-safety: immutable after Create; Fetch may run concurrently on any
// thread (each fetch uses its own connection). Fetch blocks the calling
// thread for up to about `timeout_seconds` per URL.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {
namespace server {

struct ImagePart;
struct OpenAiRequest;

struct MediaFetchParams {
  // file:// URLs are served only below this directory; "" disables them.
  std::string allowed_local_media_path;
  // Most images in one request (--limit-mm-per-prompt). vLLM's default is 999
  // per modality; a CPU server fetching, decoding and encoding that many is a
  // denial of service, so ours is 8 (raise it with the flag).
  int limit_images_per_prompt = 8;
  // Most bytes of one image as fetched (encoded), for every kind of URL
  // (decoded base64 bytes for data: URLs). OpenAI's limit is 20 MB per image.
  int64_t max_image_bytes = 20 << 20;
  // Time for one http(s) fetch, redirects included (vLLM's
  // VLLM_IMAGE_FETCH_TIMEOUT default: 5 s).
  double timeout_seconds = 5.0;
  // Most redirects followed (aiohttp's default, which vLLM's async fetch uses: 10).
  int max_redirects = 10;
};

// Parses --limit-mm-per-prompt: a count ("4"), or vLLM's forms for images
// ("image=4", {"image": 4}). Other modalities are an error; a limit must be in
// [0, 1000000].
Expected<int> ParseImageLimit(std::string_view text);

struct FetchedMedia {
  std::string bytes;
  // The media type as stated: the data URL's, or the http Content-Type
  // without parameters; "" when none (file://, or no header). Not trusted:
  // the decoder looks at the bytes.
  std::string media_type;
};

class MediaFetcher {
 public:
  // Checks the params; a non-empty allowed_local_media_path must be an
  // existing directory (it is resolved with realpath here).
  static Expected<MediaFetcher> Create(MediaFetchParams params);

  // The bytes behind `url`.
  Expected<FetchedMedia> Fetch(std::string_view url) const;

  const MediaFetchParams& params() const { return params_; }

 private:
  explicit MediaFetcher(MediaFetchParams params) : params_(std::move(params)) {}
  Expected<FetchedMedia> FetchData(std::string_view url) const;
  Expected<FetchedMedia> FetchHttp(std::string_view url) const;
  Expected<FetchedMedia> FetchFile(std::string_view url) const;

  MediaFetchParams params_;
  std::string allowed_root_;  // realpath of allowed_local_media_path; "" if disabled
};

// The images of a chat request, in order: more than
// params().limit_images_per_prompt is an error naming the first image over
// the limit; then each is fetched, the first failure naming its part. On an
// error `out_param`, when non-null, receives the part ("messages[0].content[1]").
Expected<std::vector<FetchedMedia>> FetchRequestImages(const OpenAiRequest& request,
                                                       const MediaFetcher& fetcher,
                                                       std::string* out_param = nullptr);

}  // namespace server
}  // namespace xrt
