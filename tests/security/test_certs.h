// Certificates for the security tests, made with the `openssl` command-line tool into a
// directory: a CA, a server certificate signed by it (SAN IP:127.0.0.1 and DNS:localhost, usable
// as a client certificate too, as a worker presents its own to the coordinator), a client
// certificate, a certificate of the same CA for another host ("elsewhere": SAN
// DNS:worker-elsewhere.test, IP:10.9.8.7, for a worker advertising an address that is not its
// own), and an unrelated second CA with its own server and client certificates (for
// refusals). EC P-256 keys, valid for two days.
#ifndef SLUICE_TESTS_SECURITY_TEST_CERTS_H_
#define SLUICE_TESTS_SECURITY_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/examples/subprocess.h"

namespace sluice {

struct TestCerts {
  std::string dir;
  std::string ca;  // PEM files, absolute paths
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string elsewhere_cert, elsewhere_key;
  std::string other_ca;
  std::string other_server_cert, other_server_key;
  std::string other_client_cert, other_client_key;
};

// SubprocessOptions with only a timeout.
SubprocessOptions Timeout(absl::Duration timeout);

// True when `openssl` can be run.
bool HaveOpenssl();

// Makes the files under `dir` (which must exist). INTERNAL quoting openssl's output when a step
// fails.
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

// A fresh temporary directory (mkdtemp under $TMPDIR or /tmp).
std::string MakeTempDir(const std::string& prefix);
// Removes `dir` and everything under it.
void RemoveTree(const std::string& dir);
// Writes `content` to `path`; false on failure.
bool WriteFile(const std::string& path, const std::string& content);

}  // namespace sluice

#endif  // SLUICE_TESTS_SECURITY_TEST_CERTS_H_
