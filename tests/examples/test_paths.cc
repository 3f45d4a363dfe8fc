#include "tests/examples/test_paths.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice {

std::string BuildPath(const std::string& relative) {
  const char* env = std::getenv("SLUICE_BUILD_DIR");
  std::string dir = env != nullptr && env[0] != '\0' ? env : SLUICE_DEFAULT_BUILD_DIR;
  return absl::StrCat(dir, "/", relative);
}

std::string SourcePath(const std::string& relative) {
  return absl::StrCat(SLUICE_SOURCE_DIR, "/", relative);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace sluice
