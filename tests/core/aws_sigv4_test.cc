// SigV4 against AWS's published vectors: the Signature Version 4 test suite (get-vanilla,
// get-vanilla-query-order-key-case, post-vanilla, get-utf8; credentials AKIDEXAMPLE, region
// us-east-1, service "service", 2015-08-30T12:36:00Z) and the S3 API reference's worked examples
// (GET Object with a Range, GET Bucket lifecycle, List Objects; credentials AKIAIOSFODNN7EXAMPLE,
// 2013-05-24). Expected values are the published ones. Plus credential lookup.
#include "core/io/aws_sigv4.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

constexpr char kSuiteKey[] = "AKIDEXAMPLE";
constexpr char kSuiteSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr char kS3Key[] = "AKIAIOSFODNN7EXAMPLE";
constexpr char kS3Secret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

SigV4Scope SuiteScope() { return {"us-east-1", "service", "20150830T123600Z"}; }
SigV4Scope S3Scope() { return {"us-east-1", "s3", "20130524T000000Z"}; }

SigV4Request SuiteRequest(std::string method, std::string uri) {
  SigV4Request r;
  r.method = std::move(method);
  r.canonical_uri = std::move(uri);
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  return r;
}

std::string SuiteSignature(const SigV4Request& r) {
  return SigV4Signature(kSuiteSecret, SuiteScope(),
                        SigV4StringToSign(SuiteScope(), SigV4CanonicalRequest(r)));
}

TEST(SigV4Test, GetVanilla) {
  const SigV4Request r = SuiteRequest("GET", "/");
  EXPECT_EQ(SigV4CanonicalRequest(r),
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(SigV4StringToSign(SuiteScope(), SigV4CanonicalRequest(r)),
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(SigV4Authorization({kSuiteKey, kSuiteSecret, ""}, SuiteScope(), r),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4Test, GetVanillaQueryOrderKeyCase) {
  SigV4Request r = SuiteRequest("GET", "/");
  r.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  EXPECT_EQ(SigV4CanonicalQuery(r.query), "Param1=value1&Param2=value2");
  EXPECT_EQ(SuiteSignature(r), "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4Test, PostVanilla) {
  EXPECT_EQ(SuiteSignature(SuiteRequest("POST", "/")),
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

TEST(SigV4Test, GetUtf8) {
  const std::string uri = UriEncode("/\xE1\x88\xB4", /*encode_slash=*/false);
  EXPECT_EQ(uri, "/%E1%88%B4");
  EXPECT_EQ(SuiteSignature(SuiteRequest("GET", uri)),
            "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

SigV4Request S3Request(std::string uri) {
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = std::move(uri);
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-content-sha256", kEmptySha256},
               {"x-amz-date", "20130524T000000Z"}};
  return r;
}

TEST(SigV4Test, S3GetObjectWithRange) {
  SigV4Request r = S3Request("/test.txt");
  r.headers.push_back({"Range", "bytes=0-9"});
  EXPECT_EQ(SigV4SignedHeaders(r), "host;range;x-amz-content-sha256;x-amz-date");
  EXPECT_EQ(SigV4StringToSign(S3Scope(), SigV4CanonicalRequest(r)),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(SigV4Authorization({kS3Key, kS3Secret, ""}, S3Scope(), r),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, S3GetBucketLifecycle) {
  SigV4Request r = S3Request("/");
  r.query = {{"lifecycle", ""}};
  EXPECT_EQ(SigV4Signature(kS3Secret, S3Scope(), SigV4StringToSign(S3Scope(),
                                                                    SigV4CanonicalRequest(r))),
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4Test, S3ListObjects) {
  SigV4Request r = S3Request("/");
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};
  EXPECT_EQ(SigV4Signature(kS3Secret, S3Scope(), SigV4StringToSign(S3Scope(),
                                                                    SigV4CanonicalRequest(r))),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4Test, EncodingAndDates) {
  EXPECT_EQ(UriEncode("a b/c~d+e=é", false), "a%20b/c~d%2Be%3D%C3%A9");
  EXPECT_EQ(UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(AmzDate(absl::FromUnixSeconds(1369353600)), "20130524T000000Z");
  EXPECT_EQ(Sha256Hex(""), kEmptySha256);
}

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

TEST(AwsCredentialsTest, EnvironmentFirstThenTheSharedFile) {
  record_test::TempDir dir;
  record_test::WriteWholeFile(dir.File("credentials"),
                              "[default]\naws_access_key_id = FILEKEY\n"
                              "aws_secret_access_key=FILESECRET\n\n[other]\n"
                              "aws_access_key_id=OTHERKEY\naws_secret_access_key=OTHERSECRET\n"
                              "aws_session_token=TOKEN\n");
  absl::StatusOr<AwsCredentials> env = LoadAwsCredentials(
      MapEnv({{"AWS_ACCESS_KEY_ID", "ENVKEY"}, {"AWS_SECRET_ACCESS_KEY", "ENVSECRET"},
              {"AWS_SESSION_TOKEN", "ENVTOKEN"},
              {"AWS_SHARED_CREDENTIALS_FILE", dir.File("credentials")}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->access_key_id, "ENVKEY");
  EXPECT_EQ(env->session_token, "ENVTOKEN");

  absl::StatusOr<AwsCredentials> file =
      LoadAwsCredentials(MapEnv({{"AWS_SHARED_CREDENTIALS_FILE", dir.File("credentials")}}));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->access_key_id, "FILEKEY");
  EXPECT_EQ(file->secret_access_key, "FILESECRET");

  absl::StatusOr<AwsCredentials> other = LoadAwsCredentials(MapEnv(
      {{"AWS_SHARED_CREDENTIALS_FILE", dir.File("credentials")}, {"AWS_PROFILE", "other"}}));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->access_key_id, "OTHERKEY");
  EXPECT_EQ(other->session_token, "TOKEN");

  std::filesystem::create_directories(dir.File(".aws"));
  record_test::WriteWholeFile(dir.File(".aws/credentials"),
                              "[default]\naws_access_key_id=HOMEKEY\naws_secret_access_key=S\n");
  absl::StatusOr<AwsCredentials> home = LoadAwsCredentials(MapEnv({{"HOME", dir.path()}}));
  ASSERT_TRUE(home.ok()) << home.status();
  EXPECT_EQ(home->access_key_id, "HOMEKEY");

  absl::StatusOr<AwsCredentials> none = LoadAwsCredentials(MapEnv({}));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->anonymous());
}

TEST(AwsCredentialsTest, KeyWithoutSecretIsInvalidArgument) {
  absl::StatusOr<AwsCredentials> c = LoadAwsCredentials(MapEnv({{"AWS_ACCESS_KEY_ID", "K"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("AWS_SECRET_ACCESS_KEY"), absl::string_view::npos);
}

}  // namespace
}  // namespace sluice
