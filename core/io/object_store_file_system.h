// Remote file systems over HTTP (core/io/http_client.h):
//
//   s3://bucket/key    Amazon S3 or any S3-compatible store (MinIO, moto, Ceph): SigV4-signed
//                      ranged GETs, HEAD for stat, ListObjectsV2 for globs; writes by PUT or
//                      multipart upload (object_store_upload.h), DELETE.
//   gs://bucket/key    Google Cloud Storage's XML API, the same protocol: HMAC keys signed with
//                      SigV4, or an OAuth bearer token.
//   http(s)://host/p   read-only: ranged GETs and HEAD; a pattern without wildcards "globs" to
//                      itself when it exists, wildcards are UNIMPLEMENTED (HTTP cannot list).
//
// Streams read ahead (core/io/read_ahead_stream.h); every request is retried on transport errors,
// 5xx and 429 with jittered backoff (RetryOptions). Errors name the URL: NOT_FOUND (404),
// PERMISSION_DENIED (401/403, with the store's error code and message), INVALID_ARGUMENT (other
// 4xx, a malformed URL, a redirect to another region), UNAVAILABLE (retries spent), DATA_LOSS
// (an object shorter than its size, with the offset).
//
// Configuration from the environment (ObjectStoreOptionsFromEnvironment), as the AWS SDKs read it;
// the built-in s3:// and gs:// file systems (core/io/file_system.h) read it once, at their first use
// in the process:
//   s3: credentials LoadAwsCredentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
//       AWS_SESSION_TOKEN, ~/.aws/credentials, AWS_PROFILE); region AWS_REGION, else
//       AWS_DEFAULT_REGION, else us-east-1; endpoint AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL
//       (bucket in the path), else https://BUCKET.s3.REGION.amazonaws.com (bucket in the host).
//   gs: GCS_OAUTH_TOKEN (a bearer token), else HMAC keys GCS_HMAC_ACCESS_KEY_ID and
//       GCS_HMAC_SECRET (SigV4, region "auto"), else anonymous; endpoint GCS_ENDPOINT_URL, else
//       https://storage.googleapis.com.
//   Read-ahead: SLUICE_READ_AHEAD_CHUNK_BYTES (default 4 MiB), SLUICE_READ_AHEAD_PARALLEL (4).
//   Writes: SLUICE_UPLOAD_PART_BYTES (default 16 MiB, clamped to 64 KiB .. 1 GiB).
//
// Every request goes through NewGuardedHttpClient (core/io/remote_access.h): an endpoint or an
// http(s) URL whose host is loopback, link-local (cloud metadata), private or otherwise not
// public is PERMISSION_DENIED before any connection unless the access policy allows it, and a
// redirect is never followed. Errors name http(s) URLs without userinfo or query.
//
// Thread safety: thread-safe.
#ifndef SLUICE_CORE_OBJECT_STORE_FILE_SYSTEM_H_
#define SLUICE_CORE_OBJECT_STORE_FILE_SYSTEM_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/io/aws_sigv4.h"
#include "core/io/file_system.h"
#include "core/io/http_client.h"
#include "core/io/object_store_upload.h"
#include "core/io/read_ahead_stream.h"
#include "core/io/remote_access.h"

namespace sluice {

struct ObjectStoreOptions {
  // The URL scheme served ("s3", "gs"); errors and listed names use it.
  std::string scheme = "s3";
  // "http(s)://host[:port]" of an S3-compatible endpoint, bucket in the path. Empty: AWS itself,
  // https://BUCKET.s3.REGION.amazonaws.com.
  std::string endpoint;
  std::string region = "us-east-1";
  std::string service = "s3";
  // Signs with SigV4 unless anonymous().
  AwsCredentials credentials;
  // When set, sent as "Authorization: Bearer ..." instead of a signature.
  std::string bearer_token;
  RetryOptions retry;
  ReadAheadOptions read_ahead;
  // Writes (NewWritableFile, core/io/object_store_upload.h): objects up to this size are one
  // PUT, larger ones multipart uploads of parts this size, buffered in memory (charged to the
  // memory budget). Clamped to [kMinUploadPartBytes, kMaxUploadPartBytes].
  size_t upload_part_bytes = kDefaultUploadPartBytes;
  // Keys per ListObjectsV2 page (the store may return fewer).
  int list_page_size = 1000;
  // The transport. Null: NewCurlHttpClient().
  std::shared_ptr<HttpClient> http;
  // Which endpoints `http` may reach. Null: the process's policy (ProcessRemoteAccessPolicy),
  // read at each request.
  std::shared_ptr<const RemoteAccessPolicy> access;
  // The signing clock. Null: absl::Now.
  std::function<absl::Time()> now;
};

// Options for `scheme` ("s3" or "gs") from the environment, as described above. Errors from the
// credentials lookup (a key without its secret) are INVALID_ARGUMENT.
absl::StatusOr<ObjectStoreOptions> ObjectStoreOptionsFromEnvironment(const std::string& scheme,
                                                                     const EnvLookup& env);

std::shared_ptr<FileSystem> NewObjectStoreFileSystem(ObjectStoreOptions options);

struct HttpFileSystemOptions {
  RetryOptions retry;
  ReadAheadOptions read_ahead;
  std::shared_ptr<HttpClient> http;  // null: NewCurlHttpClient()
  // Which hosts may be read. Null: the process's policy, read at each request.
  std::shared_ptr<const RemoteAccessPolicy> access;
};
std::shared_ptr<FileSystem> NewHttpFileSystem(HttpFileSystemOptions options);

// A file system whose every call fails with `error` (a scheme whose configuration is bad: the
// error reaches the pipeline that uses the scheme, not the process).
std::shared_ptr<FileSystem> NewFailingFileSystem(absl::Status error);

}  // namespace sluice

#endif  // SLUICE_CORE_OBJECT_STORE_FILE_SYSTEM_H_
