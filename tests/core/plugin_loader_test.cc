// Custom-op plugins: the example plugin (examples/plugins/example_plugin.cc) loaded with dlopen
// and run in pipelines, and the loader's refusals (missing file, no entry point, wrong API
// version, unknown op, bad arguments).
#include "core/data/plugin_loader.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/data/spec_inference.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

std::string BuildDir() {
  const char* d = std::getenv("SLUICE_BUILD_DIR");
  return d != nullptr ? d : "build";
}
std::string ExamplePlugin() {
  return BuildDir() + "/examples/plugins/libsluice_example_plugin.so";
}

std::vector<Element> RunAll(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << ds.status();
  if (!ds.ok()) return {};
  auto it = MakeIterator(*ds);
  EXPECT_TRUE(it.ok()) << it.status();
  std::vector<Element> out;
  for (int i = 0; i < 1000; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    out.push_back(std::move(e));
  }
  return out;
}

TEST(PluginLoaderTest, ExamplePluginRunsInAPipeline) {
  ASSERT_TRUE(LoadPlugins({ExamplePlugin()}).ok());
  ASSERT_TRUE(LoadPlugins({ExamplePlugin()}).ok());  // loading again is a no-op
  const std::vector<std::string> ops = PluginRegistry::Global().OpNames();
  EXPECT_NE(std::find(ops.begin(), ops.end(), "scale"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "upper"), ops.end());

  const std::string pipeline =
      "range(5).map(plugin('scale', factor=2.0, offset=1)).batch(5)";
  absl::StatusOr<Dataset> ds = Dataset::Parse(pipeline);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ElementSpecToString(*ds->element_spec()),
            "TensorSpec(shape=(None,), dtype=tf.float32, name=None)");
  std::vector<Element> got = RunAll(pipeline);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].leaf().Equals(Tensor::FromVector<float>({1, 3, 5, 7, 9})));

  // Parallel calls share the op's state; strings go through the host callbacks.
  got = RunAll("from_tensor_slices({'t': ['ab', 'Cd', ''], 'n': [1, 2, 3]})"
               ".map(plugin('upper'), key='t', num_parallel_calls=2)");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].children()[got[0].keys()[0] == "t" ? 0 : 1].leaf().string_at(0), "AB");
  EXPECT_EQ(got[1].children()[got[1].keys()[0] == "t" ? 0 : 1].leaf().string_at(0), "CD");

  // The expression round-trips with its arguments.
  absl::StatusOr<Dataset> again = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->Fingerprint(), ds->Fingerprint());
}

TEST(PluginLoaderTest, PluginErrorsNameTheOpAndItsInput) {
  ASSERT_TRUE(LoadPlugins({ExamplePlugin()}).ok());
  absl::StatusOr<Dataset> bad_arg = Dataset::Parse("range(3).map(plugin('scale', gain=2.0))");
  ASSERT_FALSE(bad_arg.ok());
  EXPECT_EQ(bad_arg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_arg.status().message().find("plugin('scale'): scale takes factor=<number>"),
            std::string::npos)
      << bad_arg.status();

  absl::StatusOr<Dataset> bad_input = Dataset::Parse("range(3).map(plugin('upper'))");
  ASSERT_FALSE(bad_input.ok());
  EXPECT_NE(bad_input.status().message().find("plugin('upper') (int64 []): upper needs a "
                                              "string tensor"),
            std::string::npos)
      << bad_input.status();

  absl::StatusOr<Dataset> unknown = Dataset::Parse("range(3).map(plugin('nope'))");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no loaded plugin provides op 'nope'"),
            std::string::npos)
      << unknown.status();
  EXPECT_NE(unknown.status().message().find("--plugin=PATH"), std::string::npos);
}

TEST(PluginLoaderTest, RefusesFilesThatAreNotCompatiblePlugins) {
  PluginRegistry registry;
  absl::Status missing = registry.Load("/nonexistent/libnothing.so");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("/nonexistent/libnothing.so"), std::string::npos);

  const std::string version = BuildDir() + "/tests/core/plugins/libsluice_test_plugin_bad_version.so";
  absl::Status v = registry.Load(version);
  EXPECT_EQ(v.code(), absl::StatusCode::kFailedPrecondition) << v;
  EXPECT_NE(v.message().find(version), std::string::npos) << v;
  EXPECT_NE(v.message().find("API version 999; this build supports version 1"),
            std::string::npos)
      << v;

  const std::string no_init = BuildDir() + "/tests/core/plugins/libsluice_test_plugin_no_init.so";
  absl::Status n = registry.Load(no_init);
  EXPECT_EQ(n.code(), absl::StatusCode::kFailedPrecondition) << n;
  EXPECT_NE(n.message().find(no_init), std::string::npos) << n;
  EXPECT_NE(n.message().find("does not export sluice_plugin_init"), std::string::npos) << n;

  absl::Status not_elf = registry.Load("tests/testdata/transforms/goldens.json");
  EXPECT_EQ(not_elf.code(), absl::StatusCode::kFailedPrecondition) << not_elf;
  EXPECT_NE(not_elf.message().find("goldens.json: cannot load"), std::string::npos) << not_elf;

  // A second plugin with an op name already taken is refused as a whole.
  ASSERT_TRUE(registry.Load(ExamplePlugin()).ok());
  static const SluiceOpDef kClash[] = {
      {"scale", +[](const SluiceArg*, int32_t, char*, size_t) -> void* { return nullptr; },
       nullptr,
       +[](void*, int32_t, int32_t, const int64_t*, int32_t*, int32_t*, int64_t*, char*,
           size_t) { return 1; },
       +[](void*, const SluiceTensorView*, const SluiceHost*, SluiceOutput*) { return 1; }}};
  static const SluicePlugin kPlugin = {SLUICE_PLUGIN_API_VERSION, "clash", 1, kClash};
  absl::Status clash = registry.Register(&kPlugin, "clash-test");
  EXPECT_EQ(clash.code(), absl::StatusCode::kAlreadyExists) << clash;
  EXPECT_NE(clash.message().find("op 'scale' is already registered"), std::string::npos);
}

}  // namespace
}  // namespace sluice
