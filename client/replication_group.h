// ReplicationGroupSource: a StepSource for ranks that must see identical batches (the ranks of
// one tensor-parallel group). The group's rank 0 (its leader) reads steps from the inner source
// and broadcasts each over the group's Collective; the other members read nothing from the
// service or the pipeline, they receive the leader's steps. Every member therefore returns the
// same sequence of steps, end of data and errors included, and each step is fetched from the
// inner source once per group.
//
// With the service: only the leaders are consumers of the job (num_consumers = number of
// groups, consumer_index = the group's index); each leader's DistributedDataset iterator source
// is the inner source here. Groups that read independently add an EndOfDataAgreement over the
// leaders' collective inside the leader's inner source.
//
// Wire format of one broadcast (Collective::Broadcast from group rank 0):
//   [u8 0 = step][u64 n][n x ([u64 L][L bytes: proto::ElementProto of one replica's value])]
//   [u8 1 = end of data]
//   [u8 2 = error][u32 absl::StatusCode][message bytes]
// (u64/u32 little-endian). The leader's source errors thus reach every member, with the
// leader's code and message.
//
// Not thread-safe (as StepSource).
#ifndef SLUICE_CLIENT_REPLICATION_GROUP_H_
#define SLUICE_CLIENT_REPLICATION_GROUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/collective.h"
#include "sluice/element.h"
#include "sluice/distributed_dataset.h"

namespace sluice {

class ReplicationGroupSource : public StepSource {
 public:
  // `group`: spans exactly the group's members, its rank 0 the leader; borrowed, must outlive
  // the source. `inner`: required on the leader (INVALID_ARGUMENT if null), must be null on the
  // others (INVALID_ARGUMENT otherwise, so a member never opens service streams by mistake).
  static absl::StatusOr<std::unique_ptr<ReplicationGroupSource>> Create(
      Collective* group, std::unique_ptr<StepSource> inner);

  // Errors: the leader's inner source's (on every member, same code and message), the
  // collective's (a member gone, a timeout), DATA_LOSS for an undecodable broadcast. Sticky.
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override;
  absl::Status GetNextStepPadded(std::vector<Element>* replicas, bool* end_of_data) override;

 private:
  ReplicationGroupSource(Collective* group, std::unique_ptr<StepSource> inner)
      : group_(group), inner_(std::move(inner)) {}
  absl::Status Next(bool padded, std::vector<Element>* replicas, bool* end_of_data);

  Collective* group_;
  std::unique_ptr<StepSource> inner_;  // leader only
  bool finished_ = false;
  absl::Status status_;
};

// The broadcast format above, exposed for tests and for other transports.
std::string EncodeReplicatedStep(const absl::Status& status, bool end_of_data,
                                 const std::vector<Element>& replicas);
// DATA_LOSS for malformed bytes. On success *status is the leader's status.
absl::Status DecodeReplicatedStep(const std::string& bytes, absl::Status* status,
                                  bool* end_of_data, std::vector<Element>* replicas);

}  // namespace sluice

#endif  // SLUICE_CLIENT_REPLICATION_GROUP_H_
