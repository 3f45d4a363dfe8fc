// The s3:// / gs:// / http(s):// file systems over a fake transport (tests/core/fake_s3_server.h):
// requests are path-style to the endpoint or virtual-host style to AWS, signed with SigV4 (or a
// bearer token, or nothing), ranged, read ahead in parallel chunks, listed page by page for globs,
// retried with backoff on 5xx and transport errors, and their errors carry the right code and
// the URL. A pipeline reading a corrupt record through s3:// says DATA_LOSS with URL and offset.
#include "core/io/object_store_file_system.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/fake_host_resolver.h"
#include "tests/core/fake_s3_server.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using testing_util::FakeHostResolver;
using testing_util::FakeS3;
using testing_util::TestPolicy;

constexpr char kEndpoint[] = "http://127.0.0.1:9";

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + (i >> 8)) & 0xff);
  return s;
}

std::string Header(const HttpRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (absl::AsciiStrToLower(k) == name) return v;
  }
  return "";
}

class ObjectStoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<FileSystem> S3(ReadAheadOptions read_ahead = {}) {
    ObjectStoreOptions o;
    o.endpoint = absl::StrCat(kEndpoint, "/");
    o.region = "eu-west-1";
    o.credentials = {"AKIDTEST", "secret", "session-token"};
    o.http = fake_;
    o.access = access_;
    o.read_ahead = read_ahead;
    o.retry.sleep = [this](absl::Duration d) { waits_.push_back(d); };
    o.now = [] { return absl::FromUnixSeconds(1369353600); };
    o.list_page_size = 10;
    return NewObjectStoreFileSystem(o);
  }

  std::shared_ptr<FakeS3> fake_ = std::make_shared<FakeS3>(kEndpoint);
  // Names resolve to a public address no test connects to; the loopback endpoint is allowed
  // as a data root would allow it.
  std::shared_ptr<const RemoteAccessPolicy> access_ =
      TestPolicy(std::make_shared<FakeHostResolver>(), {kEndpoint});
  std::vector<absl::Duration> waits_;
};

TEST_F(ObjectStoreTest, StatAndRangedReadsAreSignedPathStyleRequests) {
  fake_->Put("bucket/dir/a b.bin", Pattern(1000));
  std::shared_ptr<FileSystem> fs = S3();
  absl::StatusOr<FileStat> st = fs->Stat("s3://bucket/dir/a b.bin");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->size, 1000u);
  EXPECT_EQ(st->mtime_ns, absl::ToUnixNanos(absl::FromCivil(
                              absl::CivilSecond(2026, 12, 2, 10, 0, 0), absl::UTCTimeZone())));
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> f =
      fs->NewRandomAccessFile("s3://bucket/dir/a b.bin");
  ASSERT_TRUE(f.ok()) << f.status();
  std::string buf(100, '\0');
  absl::StatusOr<size_t> n = (*f)->ReadAt(950, buf.data(), 100);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 50u);
  EXPECT_EQ(buf.substr(0, 50), Pattern(1000).substr(950));
  n = (*f)->ReadAt(1000, buf.data(), 10);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);

  const std::vector<HttpRequest> requests = fake_->requests();
  ASSERT_GE(requests.size(), 3u);
  const HttpRequest& get = requests[2];
  EXPECT_EQ(get.method, "GET");
  EXPECT_EQ(get.url, absl::StrCat(kEndpoint, "/bucket/dir/a%20b.bin"));
  EXPECT_EQ(Header(get, "range"), "bytes=950-1049");
  EXPECT_EQ(Header(get, "host"), "127.0.0.1:9");
  EXPECT_EQ(Header(get, "x-amz-date"), "20130524T000000Z");
  EXPECT_EQ(Header(get, "x-amz-security-token"), "session-token");
  EXPECT_TRUE(absl::StartsWith(
      Header(get, "authorization"),
      "AWS4-HMAC-SHA256 Credential=AKIDTEST/20130524/eu-west-1/s3/aws4_request, SignedHeaders="
      "host;range;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature="))
      << Header(get, "authorization");
}

TEST_F(ObjectStoreTest, StreamsReadAheadInParallelChunksAndSeek) {
  const std::string data = Pattern(100000);
  fake_->Put("bucket/big", data);
  std::shared_ptr<FileSystem> fs = S3({.chunk_bytes = 4096, .parallel = 3});
  absl::StatusOr<std::unique_ptr<InputStream>> in = fs->NewInputStream("s3://bucket/big");
  ASSERT_TRUE(in.ok()) << in.status();
  std::string got;
  std::string buf(7000, '\0');
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<size_t> n = (*in)->Read(buf.data(), buf.size());
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    got.append(buf.data(), *n);
  }
  EXPECT_EQ(got, data);
  int ranged = 0;
  for (const HttpRequest& r : fake_->requests()) ranged += !Header(r, "range").empty();
  EXPECT_EQ(ranged, (100000 + 4095) / 4096);

  ASSERT_TRUE((*in)->Seek(5).ok());
  absl::StatusOr<size_t> n = (*in)->Read(buf.data(), 10);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(buf.data(), 10), data.substr(5, 10));
  ASSERT_TRUE((*in)->Seek(90000).ok());
  n = (*in)->Read(buf.data(), 7000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(buf.data(), *n), data.substr(90000, 7000));
}

TEST_F(ObjectStoreTest, GlobListsPageByPageAndMatchesOneSegment) {
  for (int i = 0; i < 25; ++i) fake_->Put(absl::StrCat("bucket/train/part-", 100 + i, ".rec"), "x");
  fake_->Put("bucket/train/sub/part-0.rec", "x");
  fake_->Put("bucket/train/part-x.txt", "x");
  fake_->Put("bucket/train/a&b.rec", "x");
  std::shared_ptr<FileSystem> fs = S3();
  absl::StatusOr<std::vector<std::string>> names = fs->Glob("s3://bucket/train/*.rec");
  ASSERT_TRUE(names.ok()) << names.status();
  ASSERT_EQ(names->size(), 26u);
  EXPECT_EQ((*names)[0], "s3://bucket/train/a&b.rec");
  EXPECT_EQ((*names)[1], "s3://bucket/train/part-100.rec");
  EXPECT_EQ(names->back(), "s3://bucket/train/part-124.rec");
  int lists = 0;
  for (const HttpRequest& r : fake_->requests()) {
    if (absl::StrContains(r.url, "list-type=2")) {
      ++lists;
      EXPECT_TRUE(absl::StrContains(r.url, "prefix=train%2F")) << r.url;
    }
  }
  EXPECT_EQ(lists, 3);  // 28 keys under train/, 10 a page

  absl::StatusOr<std::vector<std::string>> exact = fs->Glob("s3://bucket/train/part-100.rec");
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->size(), 1u);
  absl::StatusOr<std::vector<std::string>> none = fs->Glob("s3://bucket/train/nothing");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST_F(ObjectStoreTest, RetriesServerErrorsAndResetsWithGrowingJitteredBackoff) {
  fake_->Put("bucket/k", "hello");
  std::shared_ptr<FileSystem> fs = S3();
  fake_->FailNext(3, 503);
  fake_->FailNext(1, 0);
  absl::StatusOr<FileStat> st = fs->Stat("s3://bucket/k");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->size, 5u);
  ASSERT_EQ(waits_.size(), 4u);
  const absl::Duration caps[] = {absl::Milliseconds(100), absl::Milliseconds(200),
                                 absl::Milliseconds(400), absl::Milliseconds(800)};
  for (size_t i = 0; i < waits_.size(); ++i) {
    EXPECT_GE(waits_[i], absl::ZeroDuration());
    EXPECT_LE(waits_[i], caps[i]) << i;
  }

  waits_.clear();
  fake_->FailNext(6, 500);
  st = fs->Stat("s3://bucket/k");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(st.status().message(), "s3://bucket/k")) << st.status();
  EXPECT_EQ(waits_.size(), 5u);

  fake_->FailNext(6, 0);  // no response at all, six times
  st = fs->Stat("s3://bucket/k");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(st.status().message(), "s3://bucket/k")) << st.status();
  EXPECT_TRUE(absl::StrContains(st.status().message(), "6 attempts")) << st.status();
}

TEST_F(ObjectStoreTest, ErrorsHaveTheirCodesAndNameTheUrl) {
  fake_->Put("bucket/secret", "x");
  fake_->Deny("bucket/secret", 403, "AccessDenied");
  std::shared_ptr<FileSystem> fs = S3();
  absl::StatusOr<FileStat> st = fs->Stat("s3://bucket/missing");
  EXPECT_EQ(st.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(st.status().message(), "s3://bucket/missing")) << st.status();
  absl::StatusOr<std::unique_ptr<InputStream>> in = fs->NewInputStream("s3://bucket/secret");
  EXPECT_EQ(in.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(in.status().message(), "s3://bucket/secret")) << in.status();
  EXPECT_TRUE(absl::StrContains(in.status().message(), "AccessDenied")) << in.status();
  EXPECT_EQ(fs->Stat("s3:///nobucket").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fs->Glob("s3://b*/x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ObjectStoreTest, CorruptRecordThroughS3IsDataLossWithUrlAndOffset) {
  std::string bytes;
  AppendTFRecord("first", &bytes);
  const size_t second = bytes.size();
  AppendTFRecord("second", &bytes);
  bytes[second + 14] ^= 0x55;  // inside the second record's data
  fake_->Put("bucket/bad.tfrecord", bytes);
  RegisterFileSystem("s3", S3());
  absl::StatusOr<Dataset> ds = Dataset::Parse("tf_record_dataset('s3://bucket/bad.tfrecord')");
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<std::vector<Element>> got = testing_util::RunDataset(*ds);
  absl::StatusOr<ObjectStoreOptions> env = ObjectStoreOptionsFromEnvironment(
      "s3", [](const std::string&) { return std::string(); });
  RegisterFileSystem("s3", NewObjectStoreFileSystem(*env));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "s3://bucket/bad.tfrecord"))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), absl::StrCat("offset ", second)))
      << got.status();
}

TEST_F(ObjectStoreTest, AwsItselfIsVirtualHostStyleAndGcsTakesABearerToken) {
  fake_ = std::make_shared<FakeS3>("https://bucket.s3.us-west-2.amazonaws.com");
  ObjectStoreOptions aws;
  aws.region = "us-west-2";
  aws.http = fake_;
  aws.access = access_;
  std::shared_ptr<FileSystem> fs = NewObjectStoreFileSystem(aws);
  (void)fs->Stat("s3://bucket/k");
  ASSERT_EQ(fake_->requests().size(), 1u);
  EXPECT_EQ(fake_->requests()[0].url, "https://bucket.s3.us-west-2.amazonaws.com/k");
  EXPECT_EQ(Header(fake_->requests()[0], "authorization"), "");  // anonymous

  auto env = [](const std::string& name) {
    if (name == "GCS_OAUTH_TOKEN") return std::string("ya29.token");
    return std::string();
  };
  absl::StatusOr<ObjectStoreOptions> gs = ObjectStoreOptionsFromEnvironment("gs", env);
  ASSERT_TRUE(gs.ok()) << gs.status();
  EXPECT_EQ(gs->endpoint, "https://storage.googleapis.com");
  fake_ = std::make_shared<FakeS3>("https://storage.googleapis.com");
  fake_->Put("bucket/obj", "gcs");
  gs->http = fake_;
  gs->access = access_;
  fs = NewObjectStoreFileSystem(*gs);
  absl::StatusOr<FileStat> st = fs->Stat("gs://bucket/obj");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(Header(fake_->requests()[0], "authorization"), "Bearer ya29.token");
}

TEST(ObjectStoreEnvTest, S3SettingsComeFromTheAwsVariables) {
  auto env = [](const std::string& name) {
    if (name == "AWS_ACCESS_KEY_ID") return std::string("K");
    if (name == "AWS_SECRET_ACCESS_KEY") return std::string("S");
    if (name == "AWS_DEFAULT_REGION") return std::string("ap-south-1");
    if (name == "AWS_ENDPOINT_URL") return std::string("http://127.0.0.1:5000");
    if (name == "SLUICE_READ_AHEAD_PARALLEL") return std::string("8");
    return std::string();
  };
  absl::StatusOr<ObjectStoreOptions> o = ObjectStoreOptionsFromEnvironment("s3", env);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->region, "ap-south-1");
  EXPECT_EQ(o->endpoint, "http://127.0.0.1:5000");
  EXPECT_EQ(o->credentials.access_key_id, "K");
  EXPECT_EQ(o->read_ahead.parallel, 8);
}

TEST(HttpFileSystemTest, RangedReadsAndNoListing) {
  auto fake = std::make_shared<FakeS3>("http://host");
  fake->Put("files/a.txt", "line one\nline two\n");
  HttpFileSystemOptions o;
  o.http = fake;
  o.access = TestPolicy(std::make_shared<FakeHostResolver>());
  std::shared_ptr<FileSystem> fs = NewHttpFileSystem(o);
  absl::StatusOr<std::unique_ptr<InputStream>> in = fs->NewInputStream("http://host/files/a.txt");
  ASSERT_TRUE(in.ok()) << in.status();
  std::string buf(100, '\0');
  absl::StatusOr<size_t> n = (*in)->Read(buf.data(), buf.size());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(buf.substr(0, *n), "line one\nline two\n");
  EXPECT_EQ(fs->Glob("http://host/files/*.txt").status().code(),
            absl::StatusCode::kUnimplemented);
  absl::StatusOr<std::vector<std::string>> one = fs->Glob("http://host/files/a.txt");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  EXPECT_EQ(fs->Stat("http://host/files/none").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice
