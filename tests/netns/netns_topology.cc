#include "tests/netns/netns_topology.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/examples/subprocess.h"

namespace sluice {
namespace {

constexpr char kPrefix[] = "sluice-netns-";

std::string FindIp() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

absl::StatusOr<SubprocessResult> RunIp(const std::string& ip, const std::vector<std::string>& args,
                                       absl::Duration timeout) {
  std::vector<std::string> argv = {ip};
  argv.insert(argv.end(), args.begin(), args.end());
  SubprocessOptions options;
  options.timeout = timeout;
  return RunSubprocess(argv, options);
}

// Deletes namespaces sluice-netns-<pid>-... whose pid no longer runs: what a SIGKILLed test
// left behind. Best effort.
void DeleteStale(const std::string& ip, absl::Duration timeout) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(name.substr(sizeof(kPrefix) - 1), '-');
    int pid = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0 || pid == getpid()) {
      continue;
    }
    if (kill(pid, 0) == -1 && errno == ESRCH) (void)RunIp(ip, {"netns", "del", name}, timeout);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetnsTopology>> NetnsTopology::Create(
    NetnsTopologyOptions options) {
  if (options.num_hosts < 1 || options.num_hosts > 250) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_hosts must be in [1, 250], got ", options.num_hosts));
  }
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("network namespaces need root; running as uid ", geteuid()));
  }
  const std::string ip = FindIp();
  if (ip.empty()) {
    return absl::FailedPreconditionError(
        "no `ip` program (iproute2) in /usr/sbin, /sbin, /usr/bin or /bin");
  }
  DeleteStale(ip, options.command_timeout);

  static std::atomic<int> runs{0};
  std::unique_ptr<NetnsTopology> net(new NetnsTopology(options));
  net->ip_ = ip;
  net->prefix_ = absl::StrCat(kPrefix, getpid(), "-", runs.fetch_add(1));
  std::random_device random;
  net->subnet_ = 16 + static_cast<int>(random() % 224);

  // The first namespace tells whether this machine lets us make namespaces at all.
  const std::string sw = net->prefix_ + "-sw";
  absl::StatusOr<SubprocessResult> probe = RunIp(ip, {"netns", "add", sw}, options.command_timeout);
  if (!probe.ok() || probe->exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "`ip netns add ", sw, "` failed (", probe.ok() ? probe->Describe() : probe.status().ToString(),
        "): ", probe.ok() ? probe->stderr_text : ""));
  }
  net->made_.push_back(sw);

  // From here on, a failure is a real one; `net`'s destructor removes what was made.
  auto ip_cmd = [&](const std::vector<std::string>& args) { return net->Ip(args); };
  absl::Status s = ip_cmd({"-n", sw, "link", "add", "br0", "type", "bridge"});
  if (s.ok()) s = ip_cmd({"-n", sw, "link", "set", "br0", "up"});
  for (int i = 1; s.ok() && i <= options.num_hosts; ++i) {
    const std::string host = net->namespace_name(i);
    s = ip_cmd({"netns", "add", host});
    if (!s.ok()) break;
    net->made_.push_back(host);
    const std::string port = absl::StrCat("sw", i);
    s = ip_cmd({"-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
                host});
    if (s.ok()) s = ip_cmd({"-n", sw, "link", "set", port, "master", "br0", "up"});
    if (s.ok()) s = ip_cmd({"-n", host, "link", "set", "lo", "up"});
    if (s.ok()) {
      s = ip_cmd({"-n", host, "addr", "add", net->address(i) + "/24", "dev", "eth0"});
    }
    if (s.ok()) s = ip_cmd({"-n", host, "link", "set", "eth0", "up"});
  }
  if (!s.ok()) return s;
  return net;
}

NetnsTopology::~NetnsTopology() {
  // Hosts first (their veth pairs go with them), the switch last.
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    absl::Status s = Ip({"netns", "del", *it});
    if (!s.ok()) std::cerr << "NetnsTopology: " << s << std::endl;
  }
}

std::string NetnsTopology::namespace_name(int host) const {
  return absl::StrCat(prefix_, "-h", host);
}

std::string NetnsTopology::address(int host) const {
  return absl::StrCat("10.", subnet_, ".0.", host);
}

std::vector<std::string> NetnsTopology::Exec(int host, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {ip_, "netns", "exec", namespace_name(host)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::Status NetnsTopology::Cut(int host) { return SetPort(host, "down"); }

absl::Status NetnsTopology::Restore(int host) { return SetPort(host, "up"); }

absl::Status NetnsTopology::SetPort(int host, const char* state) {
  if (host < 1 || host > options_.num_hosts) {
    return absl::InvalidArgumentError(
        absl::StrCat("no host ", host, " (hosts are 1..", options_.num_hosts, ")"));
  }
  return Ip({"-n", prefix_ + "-sw", "link", "set", absl::StrCat("sw", host), state});
}

absl::Status NetnsTopology::Ip(const std::vector<std::string>& args) const {
  absl::StatusOr<SubprocessResult> r = RunIp(ip_, args, options_.command_timeout);
  if (r.ok() && r->exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "`", ip_, " ", absl::StrJoin(args, " "), "` failed: ",
      r.ok() ? absl::StrCat(r->Describe(), ": ", r->stderr_text, r->stdout_text)
             : r.status().ToString()));
}

}  // namespace sluice
