// ObjectStoreUpload: the WritableFile of an object store (core/io/object_store_file_system.h),
// written without rename: the object appears under its final name only when Close() succeeds.
//
//   Append() buffers up to `part_bytes` (reserved from the process's memory budget for the
//   file's life). Close() of an object that never filled a part sends one PUT; a larger one is
//   a multipart upload: CreateMultipartUpload when the first part is full, UploadPart for each
//   full part, the last part and CompleteMultipartUpload at Close(). Both a PUT and a completion
//   are atomic on S3: readers see the old object or the new one, never a part.
//   A failure, or destruction before Close(), sends AbortMultipartUpload (best effort: a store
//   also expires incomplete uploads by its lifecycle rules), so nothing appears.
//   `fail_if_exists` sends the PUT (or the completion) with "If-None-Match: *": 412 is
//   ALREADY_EXISTS naming the object; a store that ignores the header cannot refuse (the lock's
//   documented limitation, docs/SNAPSHOTS.md); one that rejects it (501) is UNIMPLEMENTED.
//
// Every request goes through `send`, which signs and retries (the file system's Send: transport
// errors, 5xx and 429 with bounded backoff). The store's answers are hostile input: a body over
// kMaxStoreAnswerBytes ends the transfer (RESOURCE_EXHAUSTED), and a 200 whose body is an
// <Error> document (S3 does this for a completion that failed late), an answer without an
// UploadId, or an UploadPart without an ETag is INTERNAL naming the bucket/key and the store's
// error code. Other HTTP errors are coded as reads code them (object_store_file_system.h).
//
// Thread safety: none; one caller at a time (as every WritableFile).
#ifndef SLUICE_CORE_IO_OBJECT_STORE_UPLOAD_H_
#define SLUICE_CORE_IO_OBJECT_STORE_UPLOAD_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/file_system.h"
#include "core/io/http_client.h"

namespace sluice {

// Part sizes a writer may ask for. S3 itself wants parts of at least 5 MiB (but the last);
// S3-compatible test servers may take smaller ones.
inline constexpr size_t kMinUploadPartBytes = size_t{64} << 10;
inline constexpr size_t kMaxUploadPartBytes = size_t{1} << 30;
inline constexpr size_t kDefaultUploadPartBytes = size_t{16} << 20;
// S3's limit on the parts of one upload.
inline constexpr int kMaxUploadParts = 10000;
// The largest answer to a write request kept; more is not a store's answer.
inline constexpr size_t kMaxStoreAnswerBytes = size_t{1} << 20;

// One request about the object being written; `send` adds the bucket/key path, signs it and
// retries it.
struct ObjectStoreRequest {
  std::string method;  // PUT, POST or DELETE
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};
using ObjectStoreSend =
    std::function<absl::StatusOr<HttpResponse>(const ObjectStoreRequest& request)>;

struct ObjectStoreUploadOptions {
  // Clamped to [kMinUploadPartBytes, kMaxUploadPartBytes].
  size_t part_bytes = kDefaultUploadPartBytes;
  bool fail_if_exists = false;
};

// The upload of `url` (its errors name it). RESOURCE_EXHAUSTED when the memory budget refuses
// the part buffer.
absl::StatusOr<std::unique_ptr<WritableFile>> NewObjectStoreUpload(
    std::string url, ObjectStoreSend send, const ObjectStoreUploadOptions& options);

}  // namespace sluice

#endif  // SLUICE_CORE_IO_OBJECT_STORE_UPLOAD_H_
