#include "runtime/server/media_fetcher.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "runtime/server/openai_protocol.h"

namespace xrt::server {
namespace {

namespace fs = std::filesystem;

// A 2x1 RGB PNG, and its base64 as Python's base64.b64encode writes it (an
// independent reference for the decoder).
const std::string kPng(
    "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x02\x00\x00"
    "\x00\x01\x08\x02\x00\x00\x00\x7b\x40\xe8\xdd\x00\x00\x00\x0d\x49\x44\x41\x54\x78\x9c\x63"
    "\xf8\xcf\x00\x04\xff\x01\x07\x00\x01\xff\xe2\x23\x9e\x59\x00\x00\x00\x00\x49\x45\x4e\x44"
    "\xae\x42\x60\x82",
    70);
const std::string kPngBase64 =
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4zwAE/wEHAAH/"
    "4iOeWQAAAABJRU5ErkJggg==";

MediaFetcher MakeFetcher(MediaFetchParams p = {}) {
  auto f = MediaFetcher::Create(std::move(p));
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

void ExpectError(const Expected<FetchedMedia>& got, const std::string& message) {
  ASSERT_FALSE(got.ok()) << "fetched " << got->bytes.size() << " bytes";
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(got.status().message(), message);
}

TEST(MediaFetcher, DataUrl) {
  MediaFetcher f = MakeFetcher();
  auto got = f.Fetch("data:image/png;base64," + kPngBase64);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, kPng);
  EXPECT_EQ(got->media_type, "image/png");

  // Without padding, wrapped in lines, with parameters, in upper case.
  std::string wrapped = kPngBase64.substr(0, kPngBase64.size() - 2);
  wrapped.insert(40, "\r\n");
  got = f.Fetch("DATA:Image/PNG;name=a.png;BASE64," + wrapped);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, kPng);
  EXPECT_EQ(got->media_type, "image/png");
}

TEST(MediaFetcher, BadDataUrls) {
  MediaFetcher f = MakeFetcher();
  ExpectError(f.Fetch("data:image/png;base64,iVBOR*w0"),
              "invalid base64 in the data URL: character '*' at offset 5");
  ExpectError(f.Fetch("data:image/png;base64,iVBOR"),
              "invalid base64 in the data URL: truncated (5 symbols)");
  ExpectError(f.Fetch("data:image/png;base64,iVBO=w0K"),
              "invalid base64 in the data URL: data after '=' at offset 5");
  ExpectError(f.Fetch("data:image/png;base64,iVBORwK=="),
              "invalid base64 in the data URL: truncated (7 symbols, 2 '=')");
  ExpectError(f.Fetch("data:image/png;base64,iVBORw==="),
              "invalid base64 in the data URL: truncated (6 symbols, 3 '=')");
  ExpectError(f.Fetch("data:image/png;base64,"), "the data URL holds no data");
  ExpectError(f.Fetch("data:text/plain;base64,aGk="),
              "the data URL's media type must be image/*, got 'text/plain'");
  ExpectError(f.Fetch("data:;base64,aGk="), "the data URL's media type must be image/*, got ''");
  ExpectError(f.Fetch("data:image/png,rawbytes"),
              "only base64 data URLs are supported (data:image/...;base64,...)");
  ExpectError(f.Fetch("data:image/png;base64"), "the data URL has no ',' before its data");
  ExpectError(f.Fetch("ftp://example.com/a.png"),
              "the image URL must be a data:, http(s):// or file:// URL, got "
              "'ftp://example.com/a.png'");
}

TEST(MediaFetcher, DataUrlSizeLimit) {
  MediaFetchParams p;
  p.max_image_bytes = static_cast<int64_t>(kPng.size());
  ASSERT_TRUE(MakeFetcher(p).Fetch("data:image/png;base64," + kPngBase64).ok());
  p.max_image_bytes = static_cast<int64_t>(kPng.size()) - 1;
  ExpectError(MakeFetcher(p).Fetch("data:image/png;base64," + kPngBase64),
              "the image is larger than the limit of 69 bytes");
  // Refused before decoding, however long.
  p.max_image_bytes = 1000;
  ExpectError(MakeFetcher(p).Fetch("data:image/png;base64," + std::string(1 << 20, 'A')),
              "the image is larger than the limit of 1000 bytes");
}

// An HTTP server on 127.0.0.1 serving the test's routes.
class HttpFetch : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/img.png", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kPng, "image/png; charset=binary");
    });
    server_.Get("/dir/redirect", [](const httplib::Request&, httplib::Response& res) {
      res.status = 302;
      res.set_header("Location", "../img.png");
    });
    server_.Get("/absolute-redirect", [this](const httplib::Request&, httplib::Response& res) {
      res.status = 301;
      res.set_header("Location", Url("/dir/redirect"));
    });
    server_.Get("/loop", [](const httplib::Request&, httplib::Response& res) {
      res.status = 302;
      res.set_header("Location", "/loop");
    });
    server_.Get("/to-file", [](const httplib::Request&, httplib::Response& res) {
      res.status = 302;
      res.set_header("Location", "file:///etc/passwd");
    });
    server_.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(5000, 'x'), "image/png");
    });
    // No Content-Length: the body is cut off as it arrives.
    server_.Get("/big-chunked", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("image/png", [this](size_t offset, httplib::DataSink& sink) {
        if (offset >= (size_t{1} << 24)) {  // 16 MiB: the client must stop long before
          sink.done();
          return true;
        }
        chunks_sent_++;
        std::string chunk(1000, 'x');
        return sink.write(chunk.data(), chunk.size());
      });
    });
    server_.Get("/slow", [this](const httplib::Request&, httplib::Response& res) {
      for (int i = 0; i < 300 && !release_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      res.set_content(kPng, "image/png");
    });
    server_.Get("/empty", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("", "image/png");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 5000 && !server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    release_ = true;
    server_.stop();
    thread_.join();
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // Fetching `path` fails with "fetching '<its URL>': <reason>".
  void ExpectFetchError(const std::string& path, const std::string& reason,
                        MediaFetchParams p = {}) {
    ExpectError(MakeFetcher(std::move(p)).Fetch(Url(path)),
                "fetching '" + Url(path) + "': " + reason);
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> release_{false};
  std::atomic<int> chunks_sent_{0};
};

TEST_F(HttpFetch, ServesAnImage) {
  auto got = MakeFetcher().Fetch(Url("/img.png"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, kPng);
  EXPECT_EQ(got->media_type, "image/png");
}

TEST_F(HttpFetch, FollowsRedirects) {
  // Absolute, then relative to the directory ("../img.png" from /dir/).
  auto got = MakeFetcher().Fetch(Url("/absolute-redirect"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, kPng);
  // With a limit of 1 the second hop is one too many.
  MediaFetchParams p;
  p.max_redirects = 1;
  ExpectFetchError("/absolute-redirect", "more than 1 redirects", p);
}

TEST_F(HttpFetch, RedirectLoopEnds) {
  MediaFetchParams p;
  p.max_redirects = 3;
  ExpectFetchError("/loop", "more than 3 redirects", p);
}

TEST_F(HttpFetch, RedirectMustStayHttp) {
  ExpectFetchError("/to-file", "redirected to 'file:///etc/passwd', which is not http(s)");
}

TEST_F(HttpFetch, NotFound) { ExpectFetchError("/missing.png", "HTTP 404"); }

TEST_F(HttpFetch, EmptyBody) { ExpectFetchError("/empty", "the response is empty"); }

TEST_F(HttpFetch, BodyOverTheLimit) {
  MediaFetchParams p;
  p.max_image_bytes = 4999;
  ExpectError(MakeFetcher(p).Fetch(Url("/big")),
              "the image at '" + Url("/big") + "' is larger than the limit of 4999 bytes");
  p.max_image_bytes = 5000;
  auto got = MakeFetcher(p).Fetch(Url("/big"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes.size(), 5000u);
}

TEST_F(HttpFetch, StreamedBodyOverTheLimitIsAbandoned) {
  MediaFetchParams p;
  p.max_image_bytes = 10000;
  ExpectError(MakeFetcher(p).Fetch(Url("/big-chunked")),
              "the image at '" + Url("/big-chunked") + "' is larger than the limit of 10000 bytes");
  // The client hung up early: the server did not get to send the 16 MiB.
  EXPECT_LT(chunks_sent_.load(), 16 * 1024);
}

TEST_F(HttpFetch, SlowServerTimesOut) {
  MediaFetchParams p;
  p.timeout_seconds = 0.3;
  const auto start = std::chrono::steady_clock::now();
  ExpectError(MakeFetcher(p).Fetch(Url("/slow")),
              "fetching '" + Url("/slow") + "' timed out after 0.3 s");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
}

TEST_F(HttpFetch, ConnectionErrors) {
  // Nothing listens on the port once the server is gone.
  const std::string url = Url("/img.png");
  release_ = true;
  server_.stop();
  thread_.join();
  thread_ = std::thread([] {});
  auto got = MakeFetcher().Fetch(url);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message().rfind("fetching '" + url + "' failed: ", 0), 0u)
      << got.status().message();
}

TEST_F(HttpFetch, HttpsToAPlainHttpServerFails) {
  // https goes through OpenSSL; the handshake with a plain HTTP server fails.
  const std::string url = "https://127.0.0.1:" + std::to_string(port_) + "/img.png";
  auto got = MakeFetcher().Fetch(url);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message().rfind("fetching '" + url + "' failed: ", 0), 0u)
      << got.status().message();
}

TEST(MediaFetcher, BadHttpUrls) {
  MediaFetcher f = MakeFetcher();
  ExpectError(f.Fetch("http://user:pw@example.com/a.png"),
              "credentials in image URLs are not supported: 'http://user:pw@example.com/a.png'");
  ExpectError(f.Fetch("http:///a.png"), "the URL 'http:///a.png' has no host");
  ExpectError(f.Fetch("http://example.com:99999/a.png"),
              "bad port in the URL 'http://example.com:99999/a.png'");
}

// A directory tree: root/allowed/{img.png, a b.png, sub/, link -> ../secret.png},
// root/secret.png.
class FileFetch : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/media_fetcher_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = fs::canonical(tmpl).string();  // the messages show real paths
    allowed_ = root_ + "/allowed";
    fs::create_directories(allowed_ + "/sub");
    Write(allowed_ + "/img.png", kPng);
    Write(allowed_ + "/a b.png", kPng);
    Write(root_ + "/secret.png", "secret");
    fs::create_symlink("../secret.png", allowed_ + "/link");
    fs::create_symlink(allowed_ + "/img.png", root_ + "/inward-link");
  }
  void TearDown() override { fs::remove_all(root_); }
  static void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  MediaFetcher Allowed(int64_t max_bytes = 20 << 20) {
    MediaFetchParams p;
    p.allowed_local_media_path = allowed_ + "/../allowed/";  // resolved at Create
    p.max_image_bytes = max_bytes;
    return MakeFetcher(p);
  }
  std::string Outside(const std::string& path) {
    return "the file '" + path + "' is not below --allowed-local-media-path '" + allowed_ + "'";
  }

  std::string root_, allowed_;
};

TEST_F(FileFetch, DisabledWithoutTheFlag) {
  ExpectError(MakeFetcher().Fetch("file://" + allowed_ + "/img.png"),
              "file:// image URLs are disabled; start the server with "
              "--allowed-local-media-path DIR to serve files below DIR");
}

TEST_F(FileFetch, ReadsFilesBelowTheAllowedPath) {
  MediaFetcher f = Allowed();
  for (const std::string& url :
       {"file://" + allowed_ + "/img.png", "file://localhost" + allowed_ + "/img.png",
        "file://" + allowed_ + "/a%20b.png", "file://" + allowed_ + "/sub/../img.png",
        // A link from outside to a file inside is the file inside.
        "file://" + root_ + "/inward-link"}) {
    auto got = f.Fetch(url);
    ASSERT_TRUE(got.ok()) << url << ": " << got.status().ToString();
    EXPECT_EQ(got->bytes, kPng) << url;
    EXPECT_EQ(got->media_type, "") << url;
  }
}

TEST_F(FileFetch, CannotEscape) {
  MediaFetcher f = Allowed();
  ExpectError(f.Fetch("file://" + allowed_ + "/../secret.png"),
              Outside(allowed_ + "/../secret.png"));
  ExpectError(f.Fetch("file://" + allowed_ + "/%2e%2e/secret.png"),
              Outside(allowed_ + "/../secret.png"));
  ExpectError(f.Fetch("file://" + allowed_ + "/link"), Outside(allowed_ + "/link"));
  ExpectError(f.Fetch("file:///etc/passwd"), Outside("/etc/passwd"));
  // What does not exist outside is "outside" too: no probing of the file system.
  ExpectError(f.Fetch("file://" + root_ + "/nothing.png"), Outside(root_ + "/nothing.png"));
  // The allowed directory itself is not below itself.
  ExpectError(f.Fetch("file://" + allowed_), Outside(allowed_));
}

TEST_F(FileFetch, OtherFileErrors) {
  MediaFetcher f = Allowed();
  ExpectError(f.Fetch("file://" + allowed_ + "/missing.png"),
              "cannot open the file '" + allowed_ + "/missing.png': No such file or directory");
  ExpectError(f.Fetch("file://" + allowed_ + "/sub"),
              "'" + allowed_ + "/sub' is not a regular file");
  ExpectError(f.Fetch("file://relative/img.png"),
              "a file URL must be file:///absolute/path (host empty or localhost), got "
              "'file://relative/img.png'");
  ExpectError(f.Fetch("file:img.png"),
              "a file URL must be file:///absolute/path, got 'file:img.png'");
  ExpectError(
      f.Fetch("file://" + allowed_ + "/img%2.png"),
      "bad percent-escape at offset " + std::to_string(allowed_.size() + 4) + " of the path");
  ExpectError(Allowed(69).Fetch("file://" + allowed_ + "/img.png"),
              "the file '" + allowed_ + "/img.png' is larger than the limit of 69 bytes");
}

TEST_F(FileFetch, AllowedPathMustBeADirectory) {
  MediaFetchParams p;
  p.allowed_local_media_path = root_ + "/nope";
  auto f = MediaFetcher::Create(p);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "--allowed-local-media-path '" + root_ + "/nope': No such file or directory");
  p.allowed_local_media_path = root_ + "/secret.png";
  f = MediaFetcher::Create(p);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "--allowed-local-media-path '" + root_ + "/secret.png' is not a directory");
}

TEST(MediaFetcher, BadParams) {
  MediaFetchParams p;
  p.timeout_seconds = 0;
  EXPECT_FALSE(MediaFetcher::Create(p).ok());
  p = {};
  p.max_image_bytes = 0;
  EXPECT_FALSE(MediaFetcher::Create(p).ok());
  p = {};
  p.limit_images_per_prompt = -1;
  EXPECT_FALSE(MediaFetcher::Create(p).ok());
  p = {};
  p.max_redirects = -1;
  EXPECT_FALSE(MediaFetcher::Create(p).ok());
}

TEST(MediaFetcher, ParseImageLimit) {
  EXPECT_EQ(*ParseImageLimit("4"), 4);
  EXPECT_EQ(*ParseImageLimit(" 0 "), 0);
  EXPECT_EQ(*ParseImageLimit("image=2"), 2);
  EXPECT_EQ(*ParseImageLimit(R"({"image": 3})"), 3);
  EXPECT_EQ(ParseImageLimit("video=1").status().message(),
            "--limit-mm-per-prompt: modality 'video' is not supported (only image)");
  EXPECT_EQ(ParseImageLimit(R"({"image": 1, "audio": 1})").status().message(),
            "--limit-mm-per-prompt: modality 'audio' is not supported (only image)");
  EXPECT_EQ(ParseImageLimit(R"({"image": "1"})").status().message(),
            "--limit-mm-per-prompt: 'image' must be an integer");
  EXPECT_EQ(ParseImageLimit("{}").status().message(), "--limit-mm-per-prompt: '{}' has no 'image'");
  EXPECT_EQ(ParseImageLimit("{nope").status().message(),
            "--limit-mm-per-prompt: '{nope' is not a JSON object");
  for (const char* bad : {"-1", "abc", "", "4x", "1000001"})
    EXPECT_EQ(ParseImageLimit(bad).status().message(),
              fmt::format("--limit-mm-per-prompt: '{}' is not an image count in [0, 1000000] "
                          "(forms: 4, image=4, {{\"image\": 4}})",
                          bad))
        << bad;
}

TEST(FetchRequestImages, FetchesInOrderAndNamesTheFailingPart) {
  const std::string png = "data:image/png;base64," + kPngBase64;
  const std::string gif = "data:image/gif;base64,R0lG";
  auto req = ParseChatRequest(R"({"model":"m","messages":[
      {"role":"user","content":[{"type":"text","text":"a"},
        {"type":"image_url","image_url":{"url":")" +
                              png + R"("}}]},
      {"role":"user","content":[{"type":"image_url","image_url":")" +
                              gif + R"("}]}]})");
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  MediaFetcher f = MakeFetcher();
  std::string param = "unset";
  auto got = FetchRequestImages(*req, f, &param);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].bytes, kPng);
  EXPECT_EQ((*got)[1].bytes, "GIF");
  EXPECT_EQ((*got)[1].media_type, "image/gif");

  req->images[1].url = "data:text/plain;base64,R0lG";
  got = FetchRequestImages(*req, f, &param);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "messages[1].content[0]: the data URL's media type must be image/*, got 'text/plain'");
  EXPECT_EQ(param, "messages[1].content[0]");
  EXPECT_EQ(ApiErrorFromStatus(got.status(), param).http_status, 400);
}

TEST(FetchRequestImages, TooManyImages) {
  const std::string image =
      R"({"type":"image_url","image_url":{"url":"data:image/png;base64,)" + kPngBase64 + R"("}})";
  auto req = ParseChatRequest(R"({"model":"m","messages":[{"role":"user","content":[)" + image +
                              "," + image + R"(,{"type":"text","text":"x"},)" + image + "]}]}");
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  MediaFetchParams p;
  p.limit_images_per_prompt = 2;
  std::string param;
  auto got = FetchRequestImages(*req, MakeFetcher(p), &param);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "messages[0].content[3]: at most 2 image(s) may be provided in one request "
            "(--limit-mm-per-prompt); this one has 3");
  EXPECT_EQ(param, "messages[0].content[3]");
  p.limit_images_per_prompt = 3;
  got = FetchRequestImages(*req, MakeFetcher(p), &param);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), 3u);
}

}  // namespace
}  // namespace xrt::server
