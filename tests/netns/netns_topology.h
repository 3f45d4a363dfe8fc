// NetnsTopology: several "hosts" on one machine for multi-host tests, made of Linux network
// namespaces (`ip netns`) joined by veth pairs to one bridge.
//
//   hosts 1..N: namespace  sluice-netns-<pid>-<run>-h<i>   lo up, eth0 = 10.X.0.<i>/24
//   switch:     namespace  sluice-netns-<pid>-<run>-sw     bridge br0, port sw<i> <-> host i's eth0
//
// Nothing is created in the caller's own namespace, so parallel runs (each with their own
// names) cannot clash, and the machine's real interfaces and routes are never touched; X is
// still drawn at random so that two runs' addresses differ in logs. A process runs on host i
// through Exec(i, argv): `ip netns exec <namespace> argv...` (ip execs argv in place, so the
// Subprocess's pid and process group are the program's own).
//
//   absl::StatusOr<std::unique_ptr<NetnsTopology>> net = NetnsTopology::Create({.num_hosts = 5});
//   if (absl::IsFailedPrecondition(net.status())) GTEST_SKIP() << net.status().message();
//   Subprocess::Start((*net)->Exec(1, {coordinator, "--host=" + (*net)->address(1), ...}));
//   (*net)->Cut(2);       // host 2's link goes silent: no RST, no error, packets just vanish
//   (*net)->Restore(2);
//
// Cut(i) sets the bridge-side end of host i's veth pair down: host i's eth0 loses its carrier
// and every packet to or from it is dropped, while both sides keep their addresses, routes and
// open sockets (what a pulled cable or a dead switch port looks like to TCP).
//
// Cleanup: the destructor deletes every namespace it made (the veth pairs and the bridge go
// with them), also when Create() fails half-way. Kill the processes running in the hosts
// first: a namespace with a process left in it lives on, unnamed, until that process exits.
// Create() also deletes namespaces named sluice-netns-<pid>-... whose pid no longer runs
// (left by a test that was SIGKILLed).
//
// Thread safety: not thread-safe; one test thread drives it.
#ifndef SLUICE_TESTS_NETNS_NETNS_TOPOLOGY_H_
#define SLUICE_TESTS_NETNS_NETNS_TOPOLOGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sluice {

struct NetnsTopologyOptions {
  // Hosts 1..num_hosts (at most 250).
  int num_hosts = 5;
  // Bound on each `ip` command.
  absl::Duration command_timeout = absl::Seconds(20);
};

class NetnsTopology {
 public:
  // Makes the switch and the hosts. FAILED_PRECONDITION, with the reason, when this machine
  // cannot make network namespaces (not root, no `ip` program, `ip netns add` refused): the
  // caller skips. INTERNAL naming the `ip` command and its stderr when a later step fails
  // (everything made so far is removed again).
  static absl::StatusOr<std::unique_ptr<NetnsTopology>> Create(NetnsTopologyOptions options);

  // Deletes every namespace it made; never fails (a failure is printed to stderr).
  ~NetnsTopology();
  NetnsTopology(const NetnsTopology&) = delete;
  NetnsTopology& operator=(const NetnsTopology&) = delete;

  int num_hosts() const { return options_.num_hosts; }
  // Host i's namespace name and IPv4 address ("10.X.0.i"); requires 1 <= i <= num_hosts().
  std::string namespace_name(int host) const;
  std::string address(int host) const;

  // `ip netns exec <host's namespace> argv...`: argv to hand to Subprocess::Start.
  std::vector<std::string> Exec(int host, const std::vector<std::string>& argv) const;

  // Sets host i's bridge port down (Cut) or up again (Restore). INVALID_ARGUMENT for a host
  // out of range; INTERNAL naming the command when `ip` fails.
  absl::Status Cut(int host);
  absl::Status Restore(int host);

 private:
  explicit NetnsTopology(NetnsTopologyOptions options) : options_(options) {}

  // Runs `ip args...`; INTERNAL quoting the command line and its output unless it exits 0.
  absl::Status Ip(const std::vector<std::string>& args) const;
  absl::Status SetPort(int host, const char* state);

  NetnsTopologyOptions options_;
  std::string ip_;      // path of the ip program
  std::string prefix_;  // "sluice-netns-<pid>-<run>"
  int subnet_ = 0;      // X of 10.X.0.0/24
  std::vector<std::string> made_;  // namespaces to delete, in the order made
};

}  // namespace sluice

#endif  // SLUICE_TESTS_NETNS_NETNS_TOPOLOGY_H_
