#include "core/io/object_store_file_system.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/io/object_store_response.h"
#include "core/io/object_store_upload.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::StatusOr<FileStat> StatOfResponse(const HttpResponse& r, const std::string& url) {
  FileStat st;
  auto length = r.headers.find("content-length");
  auto range = r.headers.find("content-range");  // "bytes 0-0/1234" from a 1-byte GET
  if (range != r.headers.end() && r.status == 206) {
    const size_t slash = range->second.rfind('/');
    if (slash == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(range->second).substr(slash + 1), &st.size)) {
      return absl::InvalidArgumentError(
          absl::StrCat(url, ": unreadable Content-Range '", range->second, "'"));
    }
  } else if (length == r.headers.end() || !absl::SimpleAtoi(length->second, &st.size)) {
    return absl::InvalidArgumentError(absl::StrCat(url, ": the server gave no Content-Length"));
  }
  auto modified = r.headers.find("last-modified");
  absl::Time t;
  std::string err;
  if (modified != r.headers.end() &&
      absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", modified->second, &t, &err)) {
    st.mtime_ns = absl::ToUnixNanos(t);
  }
  return st;
}

// A ranged-GET RandomAccessFile; `get(range_header)` sends one GET with that Range.
class RangedFile : public RandomAccessFile {
 public:
  using Get = std::function<absl::StatusOr<HttpResponse>(const std::string& range)>;
  RangedFile(std::string url, Get get) : url_(std::move(url)), get_(std::move(get)) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, char* dst, size_t n) const override {
    if (n == 0) return 0;
    ASSIGN_OR_RETURN(HttpResponse r,
                     get_(absl::StrCat("bytes=", offset, "-", offset + n - 1)));
    if (r.status == 416) return 0;  // the range starts at or past the end
    absl::string_view body = r.body;
    if (r.status == 200) {
      // The server ignored the Range and sent the whole object.
      body = offset >= body.size() ? absl::string_view() : body.substr(offset);
    } else if (r.status != 206) {
      return ResponseError(r, absl::StrCat("read byte ", offset, " of ", url_));
    }
    const size_t k = std::min(n, body.size());
    std::memcpy(dst, body.data(), k);
    return k;
  }
  const std::string& name() const override { return url_; }

 private:
  const std::string url_;
  const Get get_;
};

struct ObjectRef {
  std::string bucket;
  std::string key;
};

// Files it opens hold a reference to it (shared_from_this), so a file outlives a replaced
// registration.
class ObjectStoreFileSystem : public FileSystem,
                              public std::enable_shared_from_this<ObjectStoreFileSystem> {
 public:
  explicit ObjectStoreFileSystem(ObjectStoreOptions options) : options_(std::move(options)) {
    if (options_.http == nullptr) options_.http = NewCurlHttpClient();
    options_.http = NewGuardedHttpClient(std::move(options_.http), options_.access);
    if (!options_.now) options_.now = [] { return absl::Now(); };
    while (absl::EndsWith(options_.endpoint, "/")) options_.endpoint.pop_back();
  }

  absl::StatusOr<std::unique_ptr<InputStream>> NewInputStream(const std::string& url) override {
    ASSIGN_OR_RETURN(FileStat st, Stat(url));
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenUnchecked(url));
    return NewReadAheadStream(std::shared_ptr<const RandomAccessFile>(std::move(file)), st.size,
                              options_.read_ahead);
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& url) override {
    RETURN_IF_ERROR(Stat(url).status());
    return OpenUnchecked(url);
  }

  absl::StatusOr<FileStat> Stat(const std::string& url) override {
    ASSIGN_OR_RETURN(ObjectRef ref, Parse(url));
    if (ref.key.empty()) return absl::InvalidArgumentError(absl::StrCat(url, " names no object"));
    ASSIGN_OR_RETURN(HttpResponse r, Send("HEAD", ref, ObjectPath(ref), {}, ""));
    if (r.status != 200) return ResponseError(r, absl::StrCat("stat ", url));
    return StatOfResponse(r, url);
  }

  absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) override {
    ASSIGN_OR_RETURN(ObjectRef ref, Parse(pattern));
    if (pattern.find_first_of("*?[") == std::string::npos) {
      absl::StatusOr<FileStat> st = Stat(pattern);
      if (st.ok()) return std::vector<std::string>{pattern};
      if (absl::IsNotFound(st.status())) return std::vector<std::string>{};
      return st.status();
    }
    if (ref.bucket.find_first_of("*?[") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("file pattern ", pattern, ": the bucket name cannot hold a wildcard"));
    }
    const std::string prefix = GlobListPrefix(ref.key);
    std::vector<std::string> out;
    std::string token;
    for (int page = 0;; ++page) {
      std::vector<std::pair<std::string, std::string>> query = {
          {"list-type", "2"},
          {"prefix", prefix},
          {"max-keys", absl::StrCat(options_.list_page_size)}};
      if (!token.empty()) query.emplace_back("continuation-token", token);
      ASSIGN_OR_RETURN(HttpResponse r, Send("GET", ref, BucketPath(ref), query, ""));
      if (r.status != 200) return ResponseError(r, absl::StrCat("list ", pattern));
      for (const std::string& key : XmlValues(r.body, "Key")) {
        if (absl::EndsWith(key, "/")) continue;  // a folder marker
        std::string url = absl::StrCat(options_.scheme, "://", ref.bucket, "/", key);
        if (GlobMatches(pattern, url)) out.push_back(std::move(url));
      }
      const std::vector<std::string> truncated = XmlValues(r.body, "IsTruncated");
      const std::vector<std::string> next = XmlValues(r.body, "NextContinuationToken");
      if (truncated.empty() || truncated[0] != "true" || next.empty() || next[0].empty()) break;
      if (page >= 1000000) {
        return absl::ResourceExhaustedError(
            absl::StrCat("list ", pattern, ": over a million pages"));
      }
      token = next[0];
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& url, const WritableFileOptions& options) override {
    ASSIGN_OR_RETURN(ObjectRef ref, Parse(url));
    if (ref.key.empty() || absl::EndsWith(ref.key, "/")) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write ", url, ": it names no object"));
    }
    ObjectStoreUploadOptions upload;
    upload.part_bytes = options_.upload_part_bytes;
    upload.fail_if_exists = options.fail_if_exists;
    return NewObjectStoreUpload(
        url,
        [self = shared_from_this(), ref, path = ObjectPath(ref)](const ObjectStoreRequest& r) {
          return self->Send(r, ref, path);
        },
        upload);
  }

  absl::Status DeleteFile(const std::string& url) override {
    ASSIGN_OR_RETURN(ObjectRef ref, Parse(url));
    if (ref.key.empty()) return absl::InvalidArgumentError(absl::StrCat(url, " names no object"));
    ObjectStoreRequest del;
    del.method = "DELETE";
    ASSIGN_OR_RETURN(HttpResponse r, Send(del, ref, ObjectPath(ref)));
    if (r.status == 204 || r.status == 200 || r.status == 404) return absl::OkStatus();
    return ResponseError(r, absl::StrCat("delete ", url));
  }

 private:
  absl::StatusOr<ObjectRef> Parse(const std::string& url) const {
    absl::string_view rest = url;
    const std::string prefix = absl::StrCat(options_.scheme, "://");
    if (!absl::StartsWith(absl::AsciiStrToLower(rest.substr(0, prefix.size())), prefix)) {
      return absl::InvalidArgumentError(absl::StrCat(url, " is not a ", prefix, " URL"));
    }
    rest.remove_prefix(prefix.size());
    const size_t slash = rest.find('/');
    ObjectRef ref;
    ref.bucket = std::string(rest.substr(0, slash));
    if (slash != absl::string_view::npos) ref.key = std::string(rest.substr(slash + 1));
    if (ref.bucket.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(url, ": no bucket (write ", prefix, "BUCKET/KEY)"));
    }
    return ref;
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenUnchecked(const std::string& url) {
    ASSIGN_OR_RETURN(ObjectRef ref, Parse(url));
    const std::string path = ObjectPath(ref);
    return std::unique_ptr<RandomAccessFile>(new RangedFile(
        url, [self = shared_from_this(), ref, path](const std::string& range) {
          return self->Send("GET", ref, path, {}, range);
        }));
  }

  std::string ObjectPath(const ObjectRef& ref) const {
    const std::string key = UriEncode(ref.key, /*encode_slash=*/false);
    if (options_.endpoint.empty()) return absl::StrCat("/", key);
    return absl::StrCat("/", UriEncode(ref.bucket, true), "/", key);
  }
  std::string BucketPath(const ObjectRef& ref) const {
    if (options_.endpoint.empty()) return "/";
    return absl::StrCat("/", UriEncode(ref.bucket, true));
  }
  // "https://host[:port]" for `ref`'s bucket.
  std::string Origin(const ObjectRef& ref) const {
    if (!options_.endpoint.empty()) return options_.endpoint;
    return absl::StrCat("https://", ref.bucket, ".s3.", options_.region, ".amazonaws.com");
  }

  // One request (retried), signed as the options say.
  absl::StatusOr<HttpResponse> Send(const std::string& method, const ObjectRef& ref,
                                    const std::string& path,
                                    const std::vector<std::pair<std::string, std::string>>& query,
                                    const std::string& range) const {
    ObjectStoreRequest request;
    request.method = method;
    request.query = query;
    if (!range.empty()) request.headers.emplace_back("range", range);
    return Send(request, ref, path);
  }

  // `extra.headers` are signed (names lower case); a body is signed by its SHA-256, and answers
  // to requests with one are bounded (kMaxStoreAnswerBytes).
  absl::StatusOr<HttpResponse> Send(const ObjectStoreRequest& extra, const ObjectRef& ref,
                                    const std::string& path) const {
    const std::string& method = extra.method;
    const std::vector<std::pair<std::string, std::string>>& query = extra.query;
    const std::string origin = Origin(ref);
    absl::string_view host = origin;
    if (!absl::ConsumePrefix(&host, "https://")) absl::ConsumePrefix(&host, "http://");
    SigV4Request sig;
    sig.method = method;
    sig.canonical_uri = path;
    sig.query = query;
    sig.headers = {{"host", std::string(host)}};
    for (const auto& [name, value] : extra.headers) {
      sig.headers.emplace_back(absl::AsciiStrToLower(name), value);
    }
    HttpRequest request;
    request.method = method;
    request.body = extra.body;
    if (method != "GET" && method != "HEAD") request.max_response_bytes = kMaxStoreAnswerBytes;
    const std::string query_string = SigV4CanonicalQuery(query);
    request.url = absl::StrCat(origin, path, query_string.empty() ? "" : "?", query_string);
    if (!options_.bearer_token.empty()) {
      request.headers = sig.headers;
      request.headers.emplace_back("Authorization",
                                   absl::StrCat("Bearer ", options_.bearer_token));
    } else if (!options_.credentials.anonymous()) {
      const std::string date = AmzDate(options_.now());
      sig.headers.emplace_back("x-amz-date", date);
      if (!extra.body.empty()) sig.payload_hash = Sha256Hex(extra.body);
      sig.headers.emplace_back("x-amz-content-sha256", sig.payload_hash);
      if (!options_.credentials.session_token.empty()) {
        sig.headers.emplace_back("x-amz-security-token", options_.credentials.session_token);
      }
      request.headers = sig.headers;
      request.headers.emplace_back(
          "Authorization",
          SigV4Authorization(options_.credentials, {options_.region, options_.service, date},
                             sig));
    } else {
      request.headers = sig.headers;
    }
    absl::StatusOr<HttpResponse> r = SendWithRetries(*options_.http, request, options_.retry);
    if (!r.ok()) {
      // Name the object as the user wrote it; the transport's message has the HTTP URL.
      return absl::Status(r.status().code(),
                          absl::StrCat(options_.scheme, "://", ref.bucket, "/", ref.key, ": ",
                                       r.status().message()));
    }
    return r;
  }

  ObjectStoreOptions options_;
};

class HttpFileSystem : public FileSystem,
                       public std::enable_shared_from_this<HttpFileSystem> {
 public:
  explicit HttpFileSystem(HttpFileSystemOptions options) : options_(std::move(options)) {
    if (options_.http == nullptr) options_.http = NewCurlHttpClient();
    options_.http = NewGuardedHttpClient(std::move(options_.http), options_.access);
  }

  absl::StatusOr<std::unique_ptr<InputStream>> NewInputStream(const std::string& url) override {
    ASSIGN_OR_RETURN(FileStat st, Stat(url));
    return NewReadAheadStream(std::shared_ptr<const RandomAccessFile>(Open(url)), st.size,
                              options_.read_ahead);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& url) override {
    RETURN_IF_ERROR(Stat(url).status());
    return Open(url);
  }
  absl::StatusOr<FileStat> Stat(const std::string& url) override {
    ASSIGN_OR_RETURN(HttpResponse r, Send("HEAD", url, ""));
    if (r.status == 200 && r.headers.count("content-length") > 0) return StatOfResponse(r, url);
    if (r.status == 200 || r.status == 405) {
      // No length from HEAD (or no HEAD): one byte's GET says the size in Content-Range.
      ASSIGN_OR_RETURN(r, Send("GET", url, "bytes=0-0"));
    }
    if (r.status != 200 && r.status != 206) {
      return ResponseError(r, absl::StrCat("stat ", RedactUrl(url)));
    }
    return StatOfResponse(r, RedactUrl(url));
  }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) override {
    // Wildcards count in the path only: '[' also brackets an IPv6 host and '?' starts a query.
    const size_t sep = pattern.find("://");
    const size_t path = pattern.find('/', sep == std::string::npos ? 0 : sep + 3);
    const std::string in_path =
        path == std::string::npos ? "" : pattern.substr(path, pattern.find('?', path) - path);
    if (in_path.find_first_of("*[") != std::string::npos) {
      return absl::UnimplementedError(absl::StrCat(
          "file pattern ", RedactUrl(pattern), ": http(s) URLs cannot be listed; name the files"));
    }
    absl::StatusOr<FileStat> st = Stat(pattern);
    if (st.ok()) return std::vector<std::string>{pattern};
    if (absl::IsNotFound(st.status())) return std::vector<std::string>{};
    return st.status();
  }

 private:
  std::unique_ptr<RandomAccessFile> Open(const std::string& url) {
    return std::unique_ptr<RandomAccessFile>(
        new RangedFile(RedactUrl(url), [self = shared_from_this(), url](const std::string& range) {
          return self->Send("GET", url, range);
        }));
  }
  absl::StatusOr<HttpResponse> Send(const std::string& method, const std::string& url,
                                    const std::string& range) const {
    HttpRequest request;
    request.method = method;
    request.url = url;
    if (!range.empty()) request.headers.emplace_back("Range", range);
    absl::StatusOr<HttpResponse> r = SendWithRetries(*options_.http, request, options_.retry);
    if (!r.ok() && !absl::StrContains(r.status().message(), RedactUrl(url))) {
      return absl::Status(r.status().code(),
                          absl::StrCat(RedactUrl(url), ": ", r.status().message()));
    }
    return r;
  }

  HttpFileSystemOptions options_;
};

class FailingFileSystem : public FileSystem {
 public:
  explicit FailingFileSystem(absl::Status error) : error_(std::move(error)) {}
  absl::StatusOr<std::unique_ptr<InputStream>> NewInputStream(const std::string&) override {
    return error_;
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string&) override {
    return error_;
  }
  absl::StatusOr<FileStat> Stat(const std::string&) override { return error_; }
  absl::StatusOr<std::vector<std::string>> Glob(const std::string&) override { return error_; }

 private:
  const absl::Status error_;
};

ReadAheadOptions ReadAheadFromEnvironment(const EnvLookup& env) {
  ReadAheadOptions out;
  size_t chunk = 0;
  int parallel = 0;
  if (absl::SimpleAtoi(env("SLUICE_READ_AHEAD_CHUNK_BYTES"), &chunk) && chunk > 0) {
    out.chunk_bytes = chunk;
  }
  if (absl::SimpleAtoi(env("SLUICE_READ_AHEAD_PARALLEL"), &parallel) && parallel > 0) {
    out.parallel = parallel;
  }
  return out;
}

}  // namespace

absl::StatusOr<ObjectStoreOptions> ObjectStoreOptionsFromEnvironment(const std::string& scheme,
                                                                     const EnvLookup& env) {
  ObjectStoreOptions o;
  o.scheme = scheme;
  o.read_ahead = ReadAheadFromEnvironment(env);
  size_t part = 0;
  if (absl::SimpleAtoi(env("SLUICE_UPLOAD_PART_BYTES"), &part) && part > 0) {
    o.upload_part_bytes = std::clamp(part, kMinUploadPartBytes, kMaxUploadPartBytes);
  }
  if (scheme == "gs") {
    o.endpoint = env("GCS_ENDPOINT_URL");
    if (o.endpoint.empty()) o.endpoint = "https://storage.googleapis.com";
    o.region = "auto";
    o.bearer_token = env("GCS_OAUTH_TOKEN");
    o.credentials.access_key_id = env("GCS_HMAC_ACCESS_KEY_ID");
    o.credentials.secret_access_key = env("GCS_HMAC_SECRET");
    if (!o.credentials.access_key_id.empty() && o.credentials.secret_access_key.empty()) {
      return absl::InvalidArgumentError("GCS_HMAC_ACCESS_KEY_ID is set but GCS_HMAC_SECRET is not");
    }
    return o;
  }
  if (scheme != "s3") {
    return absl::InvalidArgumentError(absl::StrCat("no object store for scheme ", scheme));
  }
  ASSIGN_OR_RETURN(o.credentials, LoadAwsCredentials(env));
  o.region = env("AWS_REGION");
  if (o.region.empty()) o.region = env("AWS_DEFAULT_REGION");
  if (o.region.empty()) o.region = "us-east-1";
  o.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (o.endpoint.empty()) o.endpoint = env("AWS_ENDPOINT_URL");
  return o;
}

std::shared_ptr<FileSystem> NewObjectStoreFileSystem(ObjectStoreOptions options) {
  return std::make_shared<ObjectStoreFileSystem>(std::move(options));
}

std::shared_ptr<FileSystem> NewHttpFileSystem(HttpFileSystemOptions options) {
  return std::make_shared<HttpFileSystem>(std::move(options));
}

std::shared_ptr<FileSystem> NewFailingFileSystem(absl::Status error) {
  return std::make_shared<FailingFileSystem>(std::move(error));
}

}  // namespace sluice
