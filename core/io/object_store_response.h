// What an object store answered: the values of its XML documents and the status of an answer
// that is not a success, shared by the reads (object_store_file_system.h) and the writes
// (object_store_upload.h).
//
// Thread safety: pure functions.
#ifndef SLUICE_CORE_IO_OBJECT_STORE_RESPONSE_H_
#define SLUICE_CORE_IO_OBJECT_STORE_RESPONSE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/io/http_client.h"

namespace sluice {

// The text of every <tag>...</tag> in `xml`, unescaped. Enough for S3's flat list, upload and
// error documents.
std::vector<std::string> XmlValues(absl::string_view xml, absl::string_view tag);

// The status for a response that is not a success: NOT_FOUND (404), PERMISSION_DENIED (401,
// 403), UNAVAILABLE (5xx and 429, retries spent), INVALID_ARGUMENT otherwise; the message names
// `what` (what was done to which URL), the HTTP status and the store's error code and message.
absl::Status ResponseError(const HttpResponse& r, absl::string_view what);

}  // namespace sluice

#endif  // SLUICE_CORE_IO_OBJECT_STORE_RESPONSE_H_
