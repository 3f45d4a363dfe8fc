// Writes to s3:// (core/io/object_store_upload.h through the object-store file system) over a
// scripted transport: an object below the part size is one signed PUT whose payload hash is the
// body's; a larger one is CreateMultipartUpload, UploadParts of the part size (in order, the
// bytes exactly what was appended) and a completion naming every part's ETag; a file destroyed
// unclosed aborts its upload and a PUT never happens; 5xx answers are retried with backoff; and
// the store's hostile answers (no UploadId, a 200 carrying an <Error>, a truncated completion,
// no ETag, 412 to a conditional PUT, 403) are clear errors naming the object and the store's
// code. Through the real curl transport against a loopback server: an answer larger than
// kMaxStoreAnswerBytes and a truncated answer end in errors, not in memory or a hang.
#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/io/aws_sigv4.h"
#include "core/io/object_store_file_system.h"
#include "core/io/object_store_upload.h"
#include "gtest/gtest.h"
#include "tests/core/fake_host_resolver.h"
#include "tests/core/loopback_http_server.h"

namespace sluice {
namespace {

constexpr char kEndpoint[] = "http://127.0.0.1:9";
constexpr char kUrl[] = "s3://bucket/snap/chunks/obj";

// Answers each request with `answer(request)` and records it.
class ScriptedStore : public HttpClient {
 public:
  using Answer = std::function<absl::StatusOr<HttpResponse>(const HttpRequest&)>;
  explicit ScriptedStore(Answer answer) : answer_(std::move(answer)) {}
  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
    return answer_(request);
  }
  std::vector<HttpRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  const Answer answer_;
  mutable absl::Mutex mu_;
  std::vector<HttpRequest> requests_ ABSL_GUARDED_BY(mu_);
};

HttpResponse Ok(std::string body = "", std::string etag = "") {
  HttpResponse r;
  r.status = 200;
  r.body = std::move(body);
  if (!etag.empty()) r.headers["etag"] = etag;
  return r;
}

HttpResponse StoreError(int status, const std::string& code) {
  HttpResponse r;
  r.status = status;
  r.body = absl::StrCat("<Error><Code>", code, "</Code><Message>says ", code,
                        "</Message></Error>");
  return r;
}

std::string HeaderOf(const HttpRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (absl::AsciiStrToLower(k) == name) return v;
  }
  return "";
}

// What a well-behaved store answers: an UploadId, an ETag per part, a completion result.
HttpResponse WellBehaved(const HttpRequest& r) {
  if (r.method == "POST" && absl::StrContains(r.url, "?uploads")) {
    return Ok("<InitiateMultipartUploadResult><UploadId>up-1</UploadId>"
              "</InitiateMultipartUploadResult>");
  }
  if (r.method == "PUT" && absl::StrContains(r.url, "partNumber=")) {
    const size_t at = r.url.find("partNumber=") + 11;
    return Ok("", absl::StrCat("\"etag-", r.url.substr(at, r.url.find('&', at) - at), "\""));
  }
  if (r.method == "POST") return Ok("<CompleteMultipartUploadResult/>");
  if (r.method == "DELETE") {
    HttpResponse d;
    d.status = 204;
    return d;
  }
  return Ok();
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + (i >> 8)) & 0xff);
  return s;
}

class ObjectStoreUploadTest : public ::testing::Test {
 protected:
  std::shared_ptr<FileSystem> S3(std::shared_ptr<HttpClient> http,
                                 const std::string& endpoint = kEndpoint) {
    ObjectStoreOptions o;
    o.endpoint = endpoint;
    o.credentials = {"AKIDTEST", "secret", ""};
    o.http = std::move(http);
    o.access = testing_util::TestPolicy(std::make_shared<testing_util::FakeHostResolver>(),
                                        {endpoint});
    o.retry.sleep = [this](absl::Duration d) { waits_.push_back(d); };
    o.upload_part_bytes = kMinUploadPartBytes;
    return NewObjectStoreFileSystem(o);
  }
  // Writes `data` in appends of 1000 bytes, then closes.
  absl::Status Write(FileSystem& fs, const std::string& data, WritableFileOptions options = {}) {
    absl::StatusOr<std::unique_ptr<WritableFile>> f = fs.NewWritableFile(kUrl, options);
    if (!f.ok()) return f.status();
    for (size_t at = 0; at < data.size(); at += 1000) {
      absl::Status s = (*f)->Append(absl::string_view(data).substr(at, 1000));
      if (!s.ok()) return s;
    }
    return (*f)->Close();
  }
  std::vector<absl::Duration> waits_;
};

TEST_F(ObjectStoreUploadTest, SmallObjectIsOneSignedPut) {
  auto store = std::make_shared<ScriptedStore>(WellBehaved);
  const std::string data = Pattern(kMinUploadPartBytes);  // exactly one part: still one PUT
  ASSERT_TRUE(Write(*S3(store), data).ok());
  std::vector<HttpRequest> reqs = store->requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "PUT");
  EXPECT_EQ(reqs[0].url, absl::StrCat(kEndpoint, "/bucket/snap/chunks/obj"));
  EXPECT_EQ(reqs[0].body, data);
  EXPECT_EQ(HeaderOf(reqs[0], "x-amz-content-sha256"), Sha256Hex(data));
  EXPECT_TRUE(absl::StrContains(HeaderOf(reqs[0], "authorization"), "x-amz-content-sha256"));
  EXPECT_EQ(reqs[0].max_response_bytes, kMaxStoreAnswerBytes);
}

TEST_F(ObjectStoreUploadTest, LargeObjectIsMultipartUploadOfPartsInOrder) {
  auto store = std::make_shared<ScriptedStore>(WellBehaved);
  const std::string data = Pattern(2 * kMinUploadPartBytes + 12345);
  ASSERT_TRUE(Write(*S3(store), data).ok());
  std::vector<HttpRequest> reqs = store->requests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_TRUE(absl::StrContains(reqs[0].url, "?uploads=")) << reqs[0].url;
  std::string uploaded;
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(reqs[i].method, "PUT");
    EXPECT_TRUE(absl::StrContains(reqs[i].url, absl::StrCat("partNumber=", i, "&uploadId=up-1")))
        << reqs[i].url;
    uploaded += reqs[i].body;
  }
  EXPECT_EQ(reqs[1].body.size(), kMinUploadPartBytes);
  EXPECT_EQ(uploaded, data);
  EXPECT_EQ(reqs[4].method, "POST");
  EXPECT_TRUE(absl::StrContains(reqs[4].url, "uploadId=up-1"));
  EXPECT_EQ(reqs[4].body,
            "<CompleteMultipartUpload>"
            "<Part><PartNumber>1</PartNumber><ETag>\"etag-1\"</ETag></Part>"
            "<Part><PartNumber>2</PartNumber><ETag>\"etag-2\"</ETag></Part>"
            "<Part><PartNumber>3</PartNumber><ETag>\"etag-3\"</ETag></Part>"
            "</CompleteMultipartUpload>");
}

TEST_F(ObjectStoreUploadTest, UnclosedFileAbortsItsUploadAndPutsNothing) {
  auto store = std::make_shared<ScriptedStore>(WellBehaved);
  std::shared_ptr<FileSystem> fs = S3(store);
  {
    auto small = fs->NewWritableFile(kUrl, {});
    ASSERT_TRUE(small.ok());
    ASSERT_TRUE((*small)->Append("a few bytes").ok());
  }
  EXPECT_TRUE(store->requests().empty());  // nothing sent: nothing appears
  {
    auto large = fs->NewWritableFile(kUrl, {});
    ASSERT_TRUE(large.ok());
    ASSERT_TRUE((*large)->Append(Pattern(kMinUploadPartBytes + 1)).ok());
  }
  std::vector<HttpRequest> reqs = store->requests();
  ASSERT_EQ(reqs.size(), 3u);  // create, part 1, abort; never a completion
  EXPECT_EQ(reqs[2].method, "DELETE");
  EXPECT_TRUE(absl::StrContains(reqs[2].url, "uploadId=up-1"));
}

TEST_F(ObjectStoreUploadTest, ServerErrorsAreRetriedWithBackoff) {
  int failures = 2;
  auto store = std::make_shared<ScriptedStore>([&](const HttpRequest& r) {
    if (r.method == "PUT" && failures > 0) {
      --failures;
      return StoreError(503, "SlowDown");
    }
    return WellBehaved(r);
  });
  ASSERT_TRUE(Write(*S3(store), "hello").ok());
  EXPECT_EQ(store->requests().size(), 3u);
  EXPECT_EQ(waits_.size(), 2u);
}

// Each hostile answer, the code it must give and what the message must name.
struct Hostile {
  std::string name;
  std::function<absl::StatusOr<HttpResponse>(const HttpRequest&)> answer;
  size_t bytes;
  absl::StatusCode code;
  std::string says;
  bool fail_if_exists = false;
};

TEST_F(ObjectStoreUploadTest, HostileAnswersAreClearErrorsNamingTheObject) {
  const size_t large = kMinUploadPartBytes + 10;
  const std::vector<Hostile> cases = {
      {"no UploadId",
       [](const HttpRequest& r) {
         if (r.method == "POST") return Ok("<html>garbage</html>");
         return WellBehaved(r);
       },
       large, absl::StatusCode::kInternal, "0 UploadIds"},
      {"two UploadIds",
       [](const HttpRequest& r) {
         if (r.method == "POST") return Ok("<UploadId>a</UploadId><UploadId>b</UploadId>");
         return WellBehaved(r);
       },
       large, absl::StatusCode::kInternal, "2 UploadIds"},
      {"200 with an error document",
       [](const HttpRequest& r) {
         if (r.method == "POST" && !absl::StrContains(r.url, "uploads")) {
           return Ok("<Error><Code>InternalError</Code><Message>late</Message></Error>");
         }
         return WellBehaved(r);
       },
       large, absl::StatusCode::kInternal, "InternalError: late"},
      {"truncated completion",
       [](const HttpRequest& r) {
         if (r.method == "POST" && !absl::StrContains(r.url, "uploads")) {
           return Ok("<?xml version=\"1.0\"?><Complete");
         }
         return WellBehaved(r);
       },
       large, absl::StatusCode::kInternal, "truncated"},
      {"part without ETag",
       [](const HttpRequest& r) {
         if (r.method == "PUT") return Ok();
         return WellBehaved(r);
       },
       large, absl::StatusCode::kInternal, "no usable ETag"},
      {"access denied",
       [](const HttpRequest&) { return StoreError(403, "AccessDenied"); }, 10,
       absl::StatusCode::kPermissionDenied, "AccessDenied"},
      {"conditional PUT refused",
       [](const HttpRequest&) { return StoreError(412, "PreconditionFailed"); }, 10,
       absl::StatusCode::kAlreadyExists, "exists", true},
  };
  for (const Hostile& c : cases) {
    SCOPED_TRACE(c.name);
    auto store = std::make_shared<ScriptedStore>(c.answer);
    WritableFileOptions options;
    options.fail_if_exists = c.fail_if_exists;
    absl::Status s = Write(*S3(store), Pattern(c.bytes), options);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), kUrl)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.says)) << s;
    if (c.fail_if_exists) EXPECT_EQ(HeaderOf(store->requests()[0], "if-none-match"), "*");
    // An upload that was created and failed is aborted.
    bool created = false, aborted = false;
    for (const HttpRequest& r : store->requests()) {
      created |= r.method == "POST" && absl::StrContains(r.url, "?uploads=") &&
                 !absl::StrContains(c.name, "UploadId");
      aborted |= r.method == "DELETE";
    }
    EXPECT_EQ(aborted, created);
  }
}

TEST_F(ObjectStoreUploadTest, HugeOrTruncatedAnswersOverCurlEndInErrors) {
  // The server's write fails when curl ends the transfer early; that is not a test failure.
  ::signal(SIGPIPE, SIG_IGN);
  // 4 MiB of XML-looking garbage in a 200 to a PUT.
  std::string huge = "<PutObjectResult>";
  huge.append(4 * kMaxStoreAnswerBytes, 'x');
  testing_util::LoopbackHttpServer flood(huge);
  const std::string flood_endpoint = absl::StrCat("http://127.0.0.1:", flood.port());
  absl::Status s = Write(*S3(NewCurlHttpClient(), flood_endpoint), "small");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kUrl)) << s;

  // An answer cut off after its first bytes: a transport error, retried (6 attempts), then
  // UNAVAILABLE naming the object.
  testing_util::LoopbackHttpServer cut(
      "", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n<InitiateMultipartUploadRes");
  const std::string cut_endpoint = absl::StrCat("http://127.0.0.1:", cut.port());
  s = Write(*S3(NewCurlHttpClient(), cut_endpoint), "small");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), kUrl)) << s;
}

}  // namespace
}  // namespace sluice
