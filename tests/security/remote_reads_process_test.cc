// Remote reads are opt-in, through the real sluicectl binary and libcurl: a pipeline run in
// process that names an HTTP server on loopback fails with PERMISSION_DENIED and the server sees
// no connection at all; the same pipeline with `--data_root=http://127.0.0.1:PORT/` reads it.
// The only server is this test's, on 127.0.0.1; nothing else is contacted.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/core/loopback_http_server.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

SubprocessResult Sluicectl(std::vector<std::string> args) {
  args.insert(args.begin(), BuildPath("bin/sluicectl"));
  absl::StatusOr<SubprocessResult> r = RunSubprocess(args, {.timeout = absl::Seconds(120)});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SubprocessResult();
}

TEST(RemoteReadsProcessTest, LoopbackHttpIsRefusedBeforeConnectingUnlessARootNamesIt) {
  testing_util::LoopbackHttpServer server("alpha\nbeta\n");
  ASSERT_NE(server.port(), 0);
  const std::string url = absl::StrCat("http://127.0.0.1:", server.port(), "/lines.txt");
  const std::string pipeline = absl::StrCat("--pipeline=text_line_dataset(['", url, "'])");

  SubprocessResult refused = Sluicectl({"run", pipeline, "--devices=CPU:0", "--format=json"});
  EXPECT_NE(refused.exit_code, 0) << refused.stdout_text;
  EXPECT_TRUE(absl::StrContains(refused.stderr_text, "PERMISSION_DENIED") ||
              absl::StrContains(refused.stderr_text, "refused"))
      << refused.stderr_text;
  EXPECT_TRUE(absl::StrContains(refused.stderr_text, "loopback")) << refused.stderr_text;
  EXPECT_TRUE(absl::StrContains(
      refused.stderr_text, absl::StrCat("--data_root=http://127.0.0.1:", server.port(), "/")))
      << refused.stderr_text;
  // The numeric spelling of the same address is refused the same way.
  SubprocessResult numeric = Sluicectl(
      {"run", absl::StrCat("--pipeline=text_line_dataset(['http://2130706433:", server.port(),
                           "/lines.txt'])"),
       "--devices=CPU:0", "--format=json"});
  EXPECT_NE(numeric.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(numeric.stderr_text, "loopback")) << numeric.stderr_text;
  EXPECT_EQ(server.connections(), 0) << "a refused URL reached the server";

  SubprocessResult allowed =
      Sluicectl({"run", pipeline, "--devices=CPU:0", "--format=json",
                 absl::StrCat("--data_root=http://127.0.0.1:", server.port(), "/")});
  ASSERT_EQ(allowed.exit_code, 0) << allowed.Describe() << "\n" << allowed.stderr_text;
  EXPECT_TRUE(absl::StrContains(allowed.stdout_text, "alpha")) << allowed.stdout_text;
  EXPECT_TRUE(absl::StrContains(allowed.stdout_text, "beta")) << allowed.stdout_text;
  EXPECT_GT(server.connections(), 0);
}

}  // namespace
}  // namespace sluice
