#include "tests/security/test_certs.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/examples/subprocess.h"

namespace sluice {
namespace {

absl::Status Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<SubprocessResult> r = RunSubprocess(argv, Timeout(absl::Seconds(60)));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), ": ", r->Describe(), "\n",
                                            r->stderr_text));
  }
  return absl::OkStatus();
}

constexpr char kCaConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = CN_PLACEHOLDER
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
)";

constexpr char kLeafExtensions[] = R"(basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = SAN_PLACEHOLDER
)";

absl::Status MakeKey(const std::string& path) {
  return Openssl({"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
                  path});
}

absl::Status MakeCa(const std::string& dir, const std::string& name, std::string* pem,
                    std::string* key) {
  *pem = absl::StrCat(dir, "/", name, ".pem");
  *key = absl::StrCat(dir, "/", name, ".key");
  std::string config = kCaConfig;
  config.replace(config.find("CN_PLACEHOLDER"), 14, "Sluice test " + name);
  const std::string config_path = absl::StrCat(dir, "/", name, ".cnf");
  if (!WriteFile(config_path, config)) return absl::InternalError("cannot write " + config_path);
  if (absl::Status s = MakeKey(*key); !s.ok()) return s;
  return Openssl({"req", "-x509", "-new", "-config", config_path, "-extensions", "v3_ca", "-key",
                  *key, "-days", "2", "-out", *pem});
}

absl::Status MakeLeaf(const std::string& dir, const std::string& name, const std::string& ca,
                      const std::string& ca_key, int serial, std::string* pem, std::string* key,
                      const std::string& san = "IP:127.0.0.1,DNS:localhost") {
  *pem = absl::StrCat(dir, "/", name, ".pem");
  *key = absl::StrCat(dir, "/", name, ".key");
  const std::string csr = absl::StrCat(dir, "/", name, ".csr");
  const std::string ext = absl::StrCat(dir, "/", name, ".ext");
  std::string extensions = kLeafExtensions;
  extensions.replace(extensions.find("SAN_PLACEHOLDER"), 15, san);
  if (!WriteFile(ext, extensions)) return absl::InternalError("cannot write " + ext);
  if (absl::Status s = MakeKey(*key); !s.ok()) return s;
  if (absl::Status s = Openssl({"req", "-new", "-key", *key, "-subj", "/CN=" + name, "-out", csr});
      !s.ok()) {
    return s;
  }
  return Openssl({"x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-set_serial",
                  std::to_string(serial), "-days", "2", "-extfile", ext, "-out", *pem});
}

}  // namespace

SubprocessOptions Timeout(absl::Duration timeout) {
  SubprocessOptions o;
  o.timeout = timeout;
  return o;
}

bool HaveOpenssl() {
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"openssl", "version"}, Timeout(absl::Seconds(30)));
  return r.ok() && r->exit_code == 0;
}

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  TestCerts c;
  c.dir = dir;
  std::string ca_key, other_ca_key;
  absl::Status s = MakeCa(dir, "ca", &c.ca, &ca_key);
  if (s.ok()) s = MakeLeaf(dir, "server", c.ca, ca_key, 2, &c.server_cert, &c.server_key);
  if (s.ok()) s = MakeLeaf(dir, "client", c.ca, ca_key, 3, &c.client_cert, &c.client_key);
  if (s.ok()) {
    s = MakeLeaf(dir, "elsewhere", c.ca, ca_key, 6, &c.elsewhere_cert, &c.elsewhere_key,
                 "DNS:worker-elsewhere.test,IP:10.9.8.7");
  }
  if (s.ok()) s = MakeCa(dir, "other-ca", &c.other_ca, &other_ca_key);
  if (s.ok()) {
    s = MakeLeaf(dir, "other-server", c.other_ca, other_ca_key, 4, &c.other_server_cert,
                 &c.other_server_key);
  }
  if (s.ok()) {
    s = MakeLeaf(dir, "other-client", c.other_ca, other_ca_key, 5, &c.other_client_cert,
                 &c.other_client_key);
  }
  if (!s.ok()) return s;
  return c;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/", prefix,
                                     "XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  // Resolved, so that data-root checks compare like with like.
  return std::filesystem::canonical(buf.data()).string();
}

void RemoveTree(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace sluice
