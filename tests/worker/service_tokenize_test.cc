// tokenize() through the service: a model the worker cannot load fails the job with the error
// naming the model's path, which the consumer sees, even under ignore_errors() (which used to
// skip every element, so the job ended with no data and no error).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"

namespace sluice {
namespace {

TEST(ServiceTokenizeTest, UnloadableModelFailsTheJobNamingItEvenUnderIgnoreErrors) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/service_tokenize_test_", getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  const std::string texts = dir + "/texts.txt";
  std::ofstream(texts) << "hello world\nsecond line\nthird\n";
  const std::string missing = dir + "/missing.model";
  const std::string corrupt = dir + "/corrupt.model";
  std::ofstream(corrupt) << "this is not a protobuf \xff\xff\xff";

  Cluster cluster(1);
  const std::vector<std::pair<std::string, absl::StatusCode>> models = {
      {missing, absl::StatusCode::kNotFound}, {corrupt, absl::StatusCode::kInvalidArgument}};
  for (size_t i = 0; i < models.size(); ++i) {
    const auto& [model, code] = models[i];
    SCOPED_TRACE(model);
    auto ds = Dataset::Parse(absl::StrCat("text_line_dataset('", texts, "').map(tokenize('",
                                          model, "')).ignore_errors()"));
    ASSERT_TRUE(ds.ok()) << ds.status();
    ServiceOptions options;
    options.job_name = absl::StrCat("tokenize-", i);
    options.sharding_policy = ServiceShardingPolicy::kOff;
    // The job fails at once; the deadline only bounds a client that would wait for a worker.
    options.retry_deadline = absl::Seconds(30);
    Consumed r = Consume(cluster.address(), *ds, options, 1);
    ASSERT_FALSE(r.status.ok()) << "the job ended without an error after " << r.steps.size()
                                << " steps";
    EXPECT_TRUE(r.steps.empty());
    EXPECT_EQ(r.status.code(), code) << r.status;
    EXPECT_TRUE(absl::StrContains(r.status.message(), model)) << r.status;
  }
  ::unlink(texts.c_str());
  ::unlink(corrupt.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace sluice
