// HeartbeatView (client/heartbeat_view.h): deltas merged into a full answer, out-of-order
// answers not applied over newer ones, a new incarnation replacing the view.
#include "client/heartbeat_view.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;

proto::TaskInfo Info(int64_t id, int64_t index, const std::string& address) {
  proto::TaskInfo t;
  t.set_task_id(id);
  t.set_task_index(index);
  t.set_worker_address(address);
  return t;
}

proto::ClientHeartbeatResponse Answer(uint64_t incarnation, uint64_t version, bool delta,
                                      std::vector<proto::TaskInfo> tasks,
                                      std::vector<int64_t> removed = {}) {
  proto::ClientHeartbeatResponse r;
  r.set_incarnation(incarnation);
  r.set_version(version);
  r.set_delta(delta);
  r.set_num_tasks(9);
  for (auto& t : tasks) *r.add_tasks() = t;
  for (int64_t id : removed) r.add_removed_task_ids(id);
  return r;
}

std::vector<std::string> Listed(const proto::ClientHeartbeatResponse& r) {
  std::vector<std::string> out;
  for (const auto& t : r.tasks()) out.push_back(absl::StrCat(t.task_id(), "@", t.worker_address()));
  return out;
}

TEST(HeartbeatViewTest, DeltasMergeIntoAFullAnswerInTaskIndexOrder) {
  HeartbeatView view;
  proto::ClientHeartbeatRequest req;
  view.FillRequest(&req);
  EXPECT_EQ(req.known_version(), 0u) << "nothing applied yet";
  auto full = view.Apply(Answer(5, 10, false, {Info(1, 0, "a"), Info(2, 1, "b")}));
  EXPECT_THAT(Listed(full), ElementsAre("1@a", "2@b"));
  view.FillRequest(&req);
  EXPECT_EQ(req.known_incarnation(), 5u);
  EXPECT_EQ(req.known_version(), 10u);
  // Task 2 moved, task 3 made before it in index order... after it; task 1 removed.
  full = view.Apply(Answer(5, 12, true, {Info(3, 2, "a"), Info(2, 1, "c")}, {1}));
  EXPECT_FALSE(full.delta());
  EXPECT_EQ(full.num_tasks(), 9);
  EXPECT_THAT(Listed(full), ElementsAre("2@c", "3@a"));
  // An empty delta changes nothing.
  EXPECT_THAT(Listed(view.Apply(Answer(5, 13, true, {}))), ElementsAre("2@c", "3@a"));
}

TEST(HeartbeatViewTest, AnOlderAnswerDoesNotUndoANewerOne) {
  HeartbeatView view;
  view.Apply(Answer(5, 10, false, {Info(1, 0, "a")}));
  view.Apply(Answer(5, 20, true, {Info(1, 0, "b")}));
  EXPECT_THAT(Listed(view.Apply(Answer(5, 15, true, {Info(1, 0, "old")}))),
              ElementsAre("1@b"));
  EXPECT_THAT(Listed(view.Apply(Answer(5, 15, false, {Info(1, 0, "old")}))),
              ElementsAre("1@b"));
  // A restarted coordinator (another incarnation) replaces the view, whatever its version.
  EXPECT_THAT(Listed(view.Apply(Answer(6, 3, false, {Info(7, 0, "z")}))), ElementsAre("7@z"));
  proto::ClientHeartbeatRequest req;
  view.FillRequest(&req);
  EXPECT_EQ(req.known_incarnation(), 6u);
  EXPECT_EQ(req.known_version(), 3u);
}

}  // namespace
}  // namespace sluice
