#include "core/io/object_store_upload.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/object_store_response.h"
#include "core/tensor/host_memory.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class ObjectStoreUpload : public WritableFile {
 public:
  ObjectStoreUpload(std::string url, ObjectStoreSend send, size_t part_bytes,
                    bool fail_if_exists)
      : url_(std::move(url)),
        send_(std::move(send)),
        part_bytes_(part_bytes),
        fail_if_exists_(fail_if_exists) {}

  ~ObjectStoreUpload() override {
    if (!closed_) Abort();
    ProcessMemoryBudget().Release(static_cast<int64_t>(part_bytes_));
  }

  absl::Status Append(absl::string_view data) override {
    RETURN_IF_ERROR(Usable());
    while (!data.empty()) {
      const size_t take = std::min(data.size(), part_bytes_ - buffer_.size());
      buffer_.append(data.data(), take);
      data.remove_prefix(take);
      if (buffer_.size() == part_bytes_) {
        // A full part is sent only when more may follow, so that the last part is never empty
        // and an object of exactly one part is still a single PUT.
        if (data.empty()) break;
        error_ = SendPart();
        RETURN_IF_ERROR(error_);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    RETURN_IF_ERROR(Usable());
    if (upload_id_.empty()) {
      error_ = PutWhole();
    } else {
      error_ = SendPart();
      if (error_.ok()) error_ = Complete();
    }
    RETURN_IF_ERROR(error_);
    closed_ = true;
    buffer_ = std::string();
    return absl::OkStatus();
  }

  const std::string& name() const override { return url_; }

 private:
  absl::Status Usable() const {
    if (closed_) return absl::FailedPreconditionError(absl::StrCat(url_, " is closed"));
    if (!error_.ok()) {
      return absl::Status(error_.code(),
                          absl::StrCat(error_.message(), " (an earlier write failed)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<HttpResponse> Send(ObjectStoreRequest request) const {
    return send_(request);
  }

  // A 200 whose body is an <Error> document (S3 sends one for a completion that failed after
  // the status line went out): INTERNAL naming the object and the store's code.
  absl::Status CheckNoErrorBody(const HttpResponse& r, absl::string_view what) const {
    if (r.body.find("<Error>") == std::string::npos) return absl::OkStatus();
    const std::vector<std::string> codes = XmlValues(r.body, "Code");
    const std::vector<std::string> messages = XmlValues(r.body, "Message");
    return absl::InternalError(absl::StrCat(
        what, " ", url_, ": HTTP ", r.status, " with an error document",
        codes.empty() ? std::string() : absl::StrCat(" ", codes[0].substr(0, 200)),
        messages.empty() ? std::string() : absl::StrCat(": ", messages[0].substr(0, 500))));
  }

  absl::Status Refused(const HttpResponse& r, absl::string_view what) const {
    if (r.status == 412 && fail_if_exists_) {
      return absl::AlreadyExistsError(absl::StrCat(url_, " exists (", what, " refused: HTTP 412)"));
    }
    if (r.status == 501 && fail_if_exists_) {
      return absl::UnimplementedError(absl::StrCat(
          what, " ", url_, ": the store does not support conditional writes (If-None-Match), ",
          "so it cannot refuse a second writer"));
    }
    return ResponseError(r, absl::StrCat(what, " ", url_));
  }

  void AddCondition(ObjectStoreRequest* request) const {
    if (fail_if_exists_) request->headers.emplace_back("If-None-Match", "*");
  }

  absl::Status PutWhole() {
    ObjectStoreRequest put;
    put.method = "PUT";
    put.body = std::move(buffer_);
    AddCondition(&put);
    ASSIGN_OR_RETURN(HttpResponse r, Send(std::move(put)));
    if (r.status != 200) return Refused(r, "PUT");
    return CheckNoErrorBody(r, "PUT");
  }

  absl::Status Create() {
    ObjectStoreRequest create;
    create.method = "POST";
    create.query = {{"uploads", ""}};
    ASSIGN_OR_RETURN(HttpResponse r, Send(std::move(create)));
    if (r.status != 200) return Refused(r, "CreateMultipartUpload");
    RETURN_IF_ERROR(CheckNoErrorBody(r, "CreateMultipartUpload"));
    const std::vector<std::string> ids = XmlValues(r.body, "UploadId");
    if (ids.size() != 1 || ids[0].empty() || ids[0].size() > 1024) {
      return absl::InternalError(absl::StrCat(
          "CreateMultipartUpload ", url_, ": the store's answer holds ",
          ids.size() == 1 ? "an empty or oversized UploadId" : absl::StrCat(ids.size(), " UploadIds"),
          ", not one (HTTP ", r.status, ", ", r.body.size(), " bytes)"));
    }
    upload_id_ = ids[0];
    return absl::OkStatus();
  }

  // Sends the buffer as the next part (creating the upload first).
  absl::Status SendPart() {
    if (upload_id_.empty()) RETURN_IF_ERROR(Create());
    if (static_cast<int>(etags_.size()) >= kMaxUploadParts) {
      return absl::ResourceExhaustedError(absl::StrCat(
          url_, ": more than ", kMaxUploadParts, " parts of ", part_bytes_,
          " bytes (raise the part size)"));
    }
    const int number = static_cast<int>(etags_.size()) + 1;
    ObjectStoreRequest part;
    part.method = "PUT";
    part.query = {{"partNumber", absl::StrCat(number)}, {"uploadId", upload_id_}};
    part.body = std::move(buffer_);
    buffer_.clear();
    const std::string what = absl::StrCat("UploadPart ", number, " of");
    ASSIGN_OR_RETURN(HttpResponse r, Send(std::move(part)));
    if (r.status != 200) return Refused(r, what);
    RETURN_IF_ERROR(CheckNoErrorBody(r, what));
    auto etag = r.headers.find("etag");
    if (etag == r.headers.end() || etag->second.empty() || etag->second.size() > 1024) {
      return absl::InternalError(
          absl::StrCat(what, " ", url_, ": the store's answer has no usable ETag"));
    }
    etags_.push_back(etag->second);
    return absl::OkStatus();
  }

  absl::Status Complete() {
    ObjectStoreRequest complete;
    complete.method = "POST";
    complete.query = {{"uploadId", upload_id_}};
    complete.body = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags_.size(); ++i) {
      absl::StrAppend(&complete.body, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>",
                      etags_[i], "</ETag></Part>");
    }
    absl::StrAppend(&complete.body, "</CompleteMultipartUpload>");
    AddCondition(&complete);
    ASSIGN_OR_RETURN(HttpResponse r, Send(std::move(complete)));
    if (r.status != 200) return Refused(r, "CompleteMultipartUpload");
    RETURN_IF_ERROR(CheckNoErrorBody(r, "CompleteMultipartUpload"));
    if (r.body.find("<CompleteMultipartUploadResult") == std::string::npos) {
      return absl::InternalError(absl::StrCat(
          "CompleteMultipartUpload ", url_, ": HTTP 200 without a CompleteMultipartUploadResult ",
          "(a truncated answer: the object may not exist)"));
    }
    upload_id_.clear();
    return absl::OkStatus();
  }

  // Best effort: the store's lifecycle rules remove what an abort that fails leaves.
  void Abort() {
    if (upload_id_.empty()) return;
    ObjectStoreRequest abort;
    abort.method = "DELETE";
    abort.query = {{"uploadId", upload_id_}};
    Send(std::move(abort)).status().IgnoreError();
    upload_id_.clear();
  }

  const std::string url_;
  const ObjectStoreSend send_;
  const size_t part_bytes_;
  const bool fail_if_exists_;
  std::string buffer_;
  std::string upload_id_;  // of the multipart upload under way; empty before (or after) one
  std::vector<std::string> etags_;
  absl::Status error_;
  bool closed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WritableFile>> NewObjectStoreUpload(
    std::string url, ObjectStoreSend send, const ObjectStoreUploadOptions& options) {
  const size_t part = std::clamp(options.part_bytes, kMinUploadPartBytes, kMaxUploadPartBytes);
  RETURN_IF_ERROR(ProcessMemoryBudget().Reserve(
      static_cast<int64_t>(part), absl::StrCat("writing ", url, " (a part buffer of ", part,
                                               " bytes, SLUICE_UPLOAD_PART_BYTES)")));
  return std::unique_ptr<WritableFile>(
      new ObjectStoreUpload(std::move(url), std::move(send), part, options.fail_if_exists));
}

}  // namespace sluice
