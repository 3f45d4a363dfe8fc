// Helpers shared by the coordinator tests.
#ifndef SLUICE_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define SLUICE_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/dataset.pb.h"
#include "server/coordinator.h"

namespace sluice {
namespace server_test {

// Every integer value the dataset yields (all leaves, all elements, batches flattened), in
// order. At most `limit` elements, so that a wrong infinite pipeline fails instead of hanging.
inline absl::StatusOr<std::vector<int64_t>> RunValues(const Dataset& ds, int64_t limit = 100000) {
  auto it = MakeIterator(ds);
  if (!it.ok()) return it.status();
  std::vector<int64_t> out;
  for (int64_t i = 0; i <= limit; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok()) return s;
    if (end) return out;
    for (const Tensor& t : e.Flatten()) {
      if (t.dtype() == DType::kInt64) {
        out.insert(out.end(), t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
      } else if (t.dtype() == DType::kInt32) {
        out.insert(out.end(), t.data<int32_t>(), t.data<int32_t>() + t.num_elements());
      } else {
        return absl::InvalidArgumentError(absl::StrCat("RunValues: not an integer tensor"));
      }
    }
  }
  return absl::FailedPreconditionError("RunValues: the dataset did not end within the limit");
}

inline absl::StatusOr<std::vector<int64_t>> RunValues(const proto::DatasetDef& def) {
  auto ds = Dataset::FromDef(def);
  if (!ds.ok()) return ds.status();
  return RunValues(*ds);
}

inline std::vector<std::string> Filenames(const proto::DatasetDef& def) {
  const auto& f = def.source().text_line().filenames();
  return std::vector<std::string>(f.begin(), f.end());
}

// A worker heartbeat from `address` (wire version 1) acknowledging `known`, the coordinator's
// previous answer to this worker (nullptr: none yet); callers add tasks or an incarnation.
inline proto::WorkerHeartbeatRequest HeartbeatRequestFrom(
    const std::string& address, const proto::WorkerHeartbeatResponse* known) {
  proto::WorkerHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_worker_address(address);
  if (known != nullptr) {
    req.set_known_incarnation(known->incarnation());
    req.set_known_version(known->version());
  }
  return req;
}

// `coordinator`'s answer to `req`, which the test expects to succeed.
inline proto::WorkerHeartbeatResponse HeartbeatExpectingOk(Coordinator& coordinator,
                                                           const proto::WorkerHeartbeatRequest& req) {
  proto::WorkerHeartbeatResponse resp;
  absl::Status s = coordinator.WorkerHeartbeat(req, &resp);
  EXPECT_TRUE(s.ok()) << s;
  return resp;
}

}  // namespace server_test
}  // namespace sluice

#endif  // SLUICE_TESTS_SERVER_SERVER_TEST_UTIL_H_
