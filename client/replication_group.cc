#include "client/replication_group.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "proto/tensor.pb.h"

namespace sluice {
namespace {

constexpr char kStep = 0;
constexpr char kEnd = 1;
constexpr char kError = 2;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads a little-endian integer of `width` bytes at *pos; false when the bytes run out.
bool GetLE(const std::string& in, size_t* pos, int width, uint64_t* v) {
  if (in.size() - *pos < static_cast<size_t>(width) || *pos > in.size()) return false;
  *v = 0;
  for (int i = width - 1; i >= 0; --i) {
    *v = (*v << 8) | static_cast<unsigned char>(in[*pos + i]);
  }
  *pos += width;
  return true;
}

}  // namespace

std::string EncodeReplicatedStep(const absl::Status& status, bool end_of_data,
                                 const std::vector<Element>& replicas) {
  std::string out;
  if (!status.ok()) {
    out.push_back(kError);
    uint32_t code = static_cast<uint32_t>(status.code());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((code >> (8 * i)) & 0xff));
    out.append(status.message().data(), status.message().size());
    return out;
  }
  if (end_of_data) {
    out.push_back(kEnd);
    return out;
  }
  out.push_back(kStep);
  PutU64(&out, replicas.size());
  for (const Element& e : replicas) {
    std::string piece;
    ElementToProto(e).SerializeToString(&piece);
    PutU64(&out, piece.size());
    out += piece;
  }
  return out;
}

absl::Status DecodeReplicatedStep(const std::string& bytes, absl::Status* status,
                                  bool* end_of_data, std::vector<Element>* replicas) {
  auto malformed = [](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("replication group: malformed step broadcast: ", why));
  };
  if (bytes.empty()) return malformed("empty");
  *status = absl::OkStatus();
  *end_of_data = false;
  size_t pos = 1;
  switch (bytes[0]) {
    case kError: {
      uint64_t code = 0;
      if (!GetLE(bytes, &pos, 4, &code)) return malformed("short error");
      if (code == 0 || code > 16) return malformed("bad status code");
      *status = absl::Status(static_cast<absl::StatusCode>(code),
                             absl::string_view(bytes).substr(pos));
      return absl::OkStatus();
    }
    case kEnd:
      if (bytes.size() != 1) return malformed("bytes after end of data");
      *end_of_data = true;
      return absl::OkStatus();
    case kStep:
      break;
    default:
      return malformed("unknown kind");
  }
  uint64_t n = 0;
  if (!GetLE(bytes, &pos, 8, &n) || n > bytes.size()) return malformed("bad replica count");
  replicas->clear();
  replicas->reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len = 0;
    if (!GetLE(bytes, &pos, 8, &len) || len > bytes.size() - pos) {
      return malformed(absl::StrCat("replica ", i, " is cut short"));
    }
    proto::ElementProto p;
    if (!p.ParseFromArray(bytes.data() + pos, static_cast<int>(len))) {
      return malformed(absl::StrCat("replica ", i, " does not parse"));
    }
    pos += len;
    absl::StatusOr<Element> e = ElementFromProto(p);
    if (!e.ok()) return malformed(absl::StrCat("replica ", i, ": ", e.status().message()));
    replicas->push_back(*std::move(e));
  }
  if (pos != bytes.size()) return malformed("bytes left over");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReplicationGroupSource>> ReplicationGroupSource::Create(
    Collective* group, std::unique_ptr<StepSource> inner) {
  if (group == nullptr) return absl::InvalidArgumentError("replication group: no collective");
  if (group->rank() == 0 && inner == nullptr) {
    return absl::InvalidArgumentError("replication group: the leader (rank 0) needs a source");
  }
  if (group->rank() != 0 && inner != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replication group: rank ", group->rank(), " is not the leader and must not read"));
  }
  return std::unique_ptr<ReplicationGroupSource>(
      new ReplicationGroupSource(group, std::move(inner)));
}

absl::Status ReplicationGroupSource::GetNextStep(std::vector<Element>* replicas,
                                                 bool* end_of_data) {
  return Next(/*padded=*/false, replicas, end_of_data);
}

absl::Status ReplicationGroupSource::GetNextStepPadded(std::vector<Element>* replicas,
                                                       bool* end_of_data) {
  return Next(/*padded=*/true, replicas, end_of_data);
}

absl::Status ReplicationGroupSource::Next(bool padded, std::vector<Element>* replicas,
                                          bool* end_of_data) {
  if (!status_.ok()) return status_;
  if (finished_) {
    *end_of_data = true;
    return absl::OkStatus();
  }
  std::string bytes;
  if (group_->rank() == 0) {
    std::vector<Element> step;
    bool ended = false;
    absl::Status s =
        padded ? inner_->GetNextStepPadded(&step, &ended) : inner_->GetNextStep(&step, &ended);
    bytes = EncodeReplicatedStep(s, ended, step);
    absl::Status sent = group_->Broadcast(0, &bytes);
    if (!sent.ok()) {
      status_ = sent;
      return status_;
    }
    if (!s.ok()) {
      status_ = s;
      return status_;
    }
    if (ended) {
      finished_ = true;
      *end_of_data = true;
      return absl::OkStatus();
    }
    *end_of_data = false;
    *replicas = std::move(step);
    return absl::OkStatus();
  }
  absl::Status got = group_->Broadcast(0, &bytes);
  absl::Status leader;
  bool ended = false;
  if (got.ok()) got = DecodeReplicatedStep(bytes, &leader, &ended, replicas);
  if (!got.ok()) {
    status_ = got;
    return status_;
  }
  if (!leader.ok()) {
    status_ = leader;
    return status_;
  }
  finished_ = ended;
  *end_of_data = ended;
  return absl::OkStatus();
}

}  // namespace sluice
