#include "sluice/strategy.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "client/device_name.h"
#include "core/data/distribute/rebatch.h"
#include "distribute_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Int64Steps;
using testing::Int64Values;
using testing::ParseOrDie;
using testing::RunInt64;

MirroredStrategy Strategy(int replicas, int64_t num_workers = 1, int64_t worker_index = 0) {
  std::vector<std::string> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back("CPU:" + std::to_string(i));
  absl::StatusOr<MirroredStrategy> s =
      MirroredStrategy::Create(devices, InputWorkerLayout{num_workers, worker_index});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

DistributedDataset Distribute(const MirroredStrategy& strategy, const Dataset& ds,
                              AutoShardPolicy policy = AutoShardPolicy::kAuto) {
  InputOptions options;
  options.auto_shard_policy = policy;
  absl::StatusOr<DistributedDataset> dist = strategy.ExperimentalDistributeDataset(ds, options);
  EXPECT_TRUE(dist.ok()) << dist.status();
  if (!dist.ok()) return DistributedDataset(DistributedElementSpec(), nullptr);
  return *std::move(dist);
}

std::string ShapeOf(const DistributedElementSpec& spec, size_t leaf = 0, size_t replica = 0) {
  return spec.Flatten()[leaf].specs[replica].shape.ToString();
}

std::vector<std::string> WriteFiles(const std::string& tag, const std::vector<int>& lines,
                                    int64_t first_value = 0) {
  std::string dir = ::testing::TempDir() + "/sluice_strategy_" + tag;
  std::string mk = "mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(mk.c_str()), 0);
  std::vector<std::string> names;
  int64_t v = first_value;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string name = dir + "/f" + std::to_string(i) + ".txt";
    std::ofstream f(name);
    for (int j = 0; j < lines[i]; ++j) f << v++ << "\n";
    names.push_back(name);
  }
  return names;
}

// ---------------------------------------------------------------------------------------------
// Devices.

TEST(MirroredStrategyTest, ParsesTensorFlowDeviceNames) {
  absl::StatusOr<MirroredStrategy> s = MirroredStrategy::Create(
      {"GPU:0", "/gpu:1", "/job:worker/replica:0/task:0/device:GPU:2", "CPU:0", "/device:cpu:1"});
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::string> names;
  for (const Device& d : s->devices()) names.push_back(d.name());
  EXPECT_THAT(names, ElementsAre("GPU:0", "GPU:1", "GPU:2", "CPU:0", "CPU:1"));
  EXPECT_EQ(s->num_local_replicas(), 5);
  EXPECT_EQ(s->num_replicas_in_sync(), 5);
  for (const Device& d : s->devices()) {
    bool expected = d.type == "CPU" || d.index >= NumCudaDevices();
    EXPECT_EQ(d.host_memory, expected) << d.name();
  }
}

TEST(MirroredStrategyTest, RejectsMalformedNamesNamingThem) {
  for (const char* bad : {"GPU", "GPU:x", "GPU:-1", "TPU:0", "", "/job:w/device:GPU:0/gpu:1",
                          "/task:a/device:GPU:0", "device:GPU", "GPU:0:1"}) {
    absl::StatusOr<MirroredStrategy> s = MirroredStrategy::Create({"CPU:0", bad});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("\"" + std::string(bad) + "\"")) << bad;
  }
}

TEST(MirroredStrategyTest, RejectsDuplicatesEmptyListAndBadLayouts) {
  absl::StatusOr<MirroredStrategy> dup = MirroredStrategy::Create({"GPU:0", "/gpu:0"});
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dup.status().message(), HasSubstr("/gpu:0"));
  EXPECT_THAT(dup.status().message(), HasSubstr("No duplicates"));
  EXPECT_EQ(MirroredStrategy::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MirroredStrategy::Create({"CPU:0"}, {2, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MirroredStrategy::Create({"CPU:0"}, {0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<MirroredStrategy> ok = MirroredStrategy::Create({"CPU:0", "CPU:1"}, {3, 2});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->num_replicas_in_sync(), 6);
}

TEST(DeviceMemoryTest, GpusBeyondTheDeviceCountUseHostMemory) {
  std::vector<Device> devices = {{"GPU", 0, false}, {"GPU", 1, false}, {"CPU", 0, false}};
  EXPECT_EQ(AssignDeviceMemory(&devices, 0),
            "sluice: no GPU available; GPU:0, GPU:1 use host memory");
  EXPECT_TRUE(devices[0].host_memory && devices[1].host_memory && devices[2].host_memory);
  EXPECT_EQ(AssignDeviceMemory(&devices, 1), "sluice: only 1 GPU(s) available; GPU:1 uses host "
                                             "memory");
  EXPECT_FALSE(devices[0].host_memory);
  EXPECT_TRUE(devices[1].host_memory);
  EXPECT_EQ(AssignDeviceMemory(&devices, 2), "");
  EXPECT_FALSE(devices[1].host_memory);
}

TEST(DeviceMemoryDeathTest, WarnsOncePerProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the warning not yet given
  const int n = NumCudaDevices();
  const std::string a = "GPU:" + std::to_string(n), b = "GPU:" + std::to_string(n + 1);
  const std::string expected =
      (n == 0 ? std::string("sluice: no GPU available; ")
              : "sluice: only " + std::to_string(n) + " GPU(s) available; ") +
      a + ", " + b + " use host memory\n";
  EXPECT_EXIT(
      {
        for (int i = 0; i < 3; ++i) {
          if (!MirroredStrategy::Create({a, b}).ok()) std::exit(1);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), ::testing::Truly([&](const std::string& err) {
        size_t first = err.find(expected);
        return first != std::string::npos && err.find(expected, first + 1) == std::string::npos;
      }));
}

// ---------------------------------------------------------------------------------------------
// experimental_distribute_dataset: the seed.

TEST(ExperimentalDistributeDatasetTest, SeedForLoop) {
  // from_tensors(([1.],[1.])).repeat(4).batch(4) on GPU:0, GPU:1: labels - 0.3 * features = 0.7
  // in a (2, 1) tensor on each replica, one step.
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create({"GPU:0", "GPU:1"});
  ASSERT_TRUE(strategy.ok());
  DistributedDataset dist =
      Distribute(*strategy, ParseOrDie("from_tensors(([1.], [1.])).repeat(4).batch(4)"));
  int steps = 0;
  for (const PerReplica<Element>& x : dist) {
    ++steps;
    auto loss = strategy->Run(
        [](const Element& input) {
          const Tensor& features = input.children()[0].leaf();
          const Tensor& labels = input.children()[1].leaf();
          std::vector<float> out;
          for (int64_t i = 0; i < labels.num_elements(); ++i) {
            out.push_back(labels.data<float>()[i] - 0.3f * features.data<float>()[i]);
          }
          return Tensor::FromVector(out, labels.shape());
        },
        x);
    ASSERT_EQ(loss.num_replicas(), 2u);
    for (const Tensor& t : loss) {
      EXPECT_EQ(t.shape(), Shape({2, 1}));
      EXPECT_FLOAT_EQ(t.data<float>()[0], 0.7f);
      EXPECT_FLOAT_EQ(t.data<float>()[1], 0.7f);
    }
  }
  EXPECT_TRUE(dist.iteration_status().ok()) << dist.iteration_status();
  EXPECT_EQ(steps, 1);
}

TEST(ExperimentalDistributeDatasetTest, SeedExplicitIteratorRestartsEachEpoch) {
  DistributedDataset dist =
      Distribute(Strategy(2), ParseOrDie("from_tensors(([1.], [1.])).repeat(50).batch(4)"));
  for (int epoch = 0; epoch < 2; ++epoch) {
    absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
    ASSERT_TRUE(it.ok());
    for (int step = 0; step < 3; ++step) {
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      ASSERT_TRUE(x.ok()) << x.status();
      ASSERT_EQ(x->num_replicas(), 2u);
      EXPECT_EQ((*x)[0].children()[0].leaf().shape(), Shape({2, 1}));
    }
  }
  // 50 elements: 12 full steps and a last one of [1] per replica.
  Int64Steps unused;
  absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
  ASSERT_TRUE(it.ok());
  int steps = 0;
  std::vector<int64_t> last_sizes;
  for (;; ++steps) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      EXPECT_TRUE(absl::IsOutOfRange(x.status()));
      break;
    }
    last_sizes.clear();
    for (const Element& e : *x) last_sizes.push_back(e.children()[0].leaf().shape().dim(0));
  }
  EXPECT_EQ(steps, 13);
  EXPECT_THAT(last_sizes, ElementsAre(1, 1));
}

TEST(ExperimentalDistributeDatasetTest, SeedElementSpec) {
  DistributedDataset dist =
      Distribute(Strategy(2), ParseOrDie("from_tensors(([1.], [2])).repeat(100).batch(16)"));
  const DistributedElementSpec& spec = dist.element_spec();
  ASSERT_EQ(spec.kind(), NestKind::kTuple);
  ASSERT_EQ(spec.children().size(), 2u);
  for (size_t leaf = 0; leaf < 2; ++leaf) {
    const PerReplicaSpec& prs = spec.children()[leaf].leaf();
    ASSERT_EQ(prs.specs.size(), 2u);
    for (const TensorSpec& s : prs.specs) {
      EXPECT_EQ(s.shape.ToString(), "(None, 1)");
      EXPECT_EQ(s.dtype, leaf == 0 ? DType::kFloat32 : DType::kInt32);
    }
  }
  absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_TRUE(testing::SpecEquals(it->element_spec(), spec));
  // Every value is compatible with the spec.
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok()) << x.status();
    for (size_t r = 0; r < 2; ++r) {
      std::vector<Tensor> leaves = (*x)[r].Flatten();
      std::vector<PerReplicaSpec> specs = spec.Flatten();
      for (size_t l = 0; l < leaves.size(); ++l) {
        EXPECT_TRUE(specs[l].specs[r].IsCompatibleWith(leaves[l]));
      }
    }
  }
}

TEST(ExperimentalDistributeDatasetTest, SeedIterSplitsEachBatchInOrder) {
  DistributedDataset dist =
      Distribute(Strategy(2), ParseOrDie("from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)"));
  absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
  ASSERT_TRUE(it.ok());
  absl::StatusOr<PerReplica<Element>> x = it->GetNext();
  ASSERT_TRUE(x.ok()) << x.status();
  const Tensor& r0 = (*x)[0].leaf();
  const Tensor& r1 = (*x)[1].leaf();
  EXPECT_EQ(r0.dtype(), DType::kInt32);
  EXPECT_EQ(r0.shape(), Shape({2}));
  EXPECT_EQ(r0.data<int32_t>()[0], 1);
  EXPECT_EQ(r0.data<int32_t>()[1], 2);
  EXPECT_EQ(r1.data<int32_t>()[0], 3);
  EXPECT_EQ(r1.data<int32_t>()[1], 4);
  EXPECT_EQ(ShapeOf(dist.element_spec()), "(None,)");
}

// ---------------------------------------------------------------------------------------------
// Rebatching, partial steps, element_spec.

TEST(ExperimentalDistributeDatasetTest, PartialLastStepGetsSizeZeroDummies) {
  Int64Steps steps = RunInt64(Distribute(Strategy(2), ParseOrDie("range(9).batch(4)")));
  EXPECT_THAT(steps, ElementsAre(ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)),
                                 ElementsAre(ElementsAre(4, 5), ElementsAre(6, 7)),
                                 ElementsAre(ElementsAre(8), ElementsAre())));
  // Dummies keep the inner dimensions: (0, 1) for a (None, 1) spec.
  DistributedDataset dist =
      Distribute(Strategy(3), ParseOrDie("from_tensor_slices([[1.], [2.], [3.], [4.]]).batch(4)"),
                 AutoShardPolicy::kOff);
  absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
  ASSERT_TRUE(it.ok());
  absl::StatusOr<PerReplica<Element>> x = it->GetNext();
  ASSERT_TRUE(x.ok());
  EXPECT_EQ((*x)[0].leaf().shape(), Shape({2, 1}));
  EXPECT_EQ((*x)[2].leaf().shape(), Shape({1, 1}));
  EXPECT_TRUE(absl::IsOutOfRange(it->GetNext().status()));
}

TEST(ExperimentalDistributeDatasetTest, DropRemainderBothWays) {
  DistributedDataset keep = Distribute(Strategy(2), ParseOrDie("range(9).batch(4)"));
  EXPECT_EQ(ShapeOf(keep.element_spec()), "(None,)");
  EXPECT_EQ(RunInt64(keep).size(), 3u);
  DistributedDataset drop =
      Distribute(Strategy(2), ParseOrDie("range(9).batch(4, drop_remainder=True)"));
  EXPECT_EQ(ShapeOf(drop.element_spec()), "(2,)");
  EXPECT_THAT(RunInt64(drop), ElementsAre(ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)),
                                          ElementsAre(ElementsAre(4, 5), ElementsAre(6, 7))));
  // Static only when B divides evenly: B=3 over 2 gives (None,).
  DistributedDataset uneven =
      Distribute(Strategy(2), ParseOrDie("range(9).batch(3, drop_remainder=True)"));
  EXPECT_EQ(ShapeOf(uneven.element_spec()), "(None,)");
  EXPECT_THAT(RunInt64(uneven), ElementsAre(ElementsAre(ElementsAre(0, 1), ElementsAre(2)),
                                            ElementsAre(ElementsAre(3, 4), ElementsAre(5)),
                                            ElementsAre(ElementsAre(6, 7), ElementsAre(8))));
}

TEST(ExperimentalDistributeDatasetTest, DictAndTupleStructures) {
  DistributedDataset dist = Distribute(
      Strategy(2),
      ParseOrDie("from_tensor_slices({'b': [[1.], [2.], [3.], [4.], [5.]], 'a': [1, 2, 3, 4, "
                 "5]}).batch(2)"));
  const DistributedElementSpec& spec = dist.element_spec();
  ASSERT_EQ(spec.kind(), NestKind::kDict);
  EXPECT_THAT(spec.keys(), ElementsAre("b", "a"));
  EXPECT_EQ(spec.children()[0].leaf().specs[1].shape.ToString(), "(None, 1)");
  EXPECT_EQ(spec.children()[1].leaf().specs[0].dtype, DType::kInt32);
  absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
  ASSERT_TRUE(it.ok());
  std::vector<int32_t> a;
  int steps = 0;
  for (; steps < 10; ++steps) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) break;
    for (const Element& e : *x) {
      ASSERT_EQ(e.kind(), NestKind::kDict);
      EXPECT_THAT(e.keys(), ElementsAre("b", "a"));
      const Tensor& t = e.children()[1].leaf();
      for (int64_t i = 0; i < t.num_elements(); ++i) a.push_back(t.data<int32_t>()[i]);
      EXPECT_EQ(e.children()[0].leaf().shape().dim(0), t.shape().dim(0));
    }
  }
  EXPECT_EQ(steps, 3);  // [1],[2] | [3],[4] | [5],[]
  EXPECT_THAT(a, ElementsAre(1, 2, 3, 4, 5));

  DistributedDataset tuple = Distribute(
      Strategy(2), ParseOrDie("from_tensor_slices(([1, 2, 3, 4], (['a', 'b', 'c', 'd'], [[1., "
                              "2.], [3., 4.], [5., 6.], [7., 8.]]))).batch(4, "
                              "drop_remainder=True)"));
  const DistributedElementSpec& ts = tuple.element_spec();
  ASSERT_EQ(ts.kind(), NestKind::kTuple);
  ASSERT_EQ(ts.children()[1].kind(), NestKind::kTuple);
  EXPECT_EQ(ts.children()[1].children()[0].leaf().specs[0].dtype, DType::kString);
  EXPECT_EQ(ts.children()[1].children()[1].leaf().specs[1].shape.ToString(), "(2, 2)");
  absl::StatusOr<DistributedIterator> tit = tuple.MakeIterator();
  ASSERT_TRUE(tit.ok());
  absl::StatusOr<PerReplica<Element>> x = tit->GetNext();
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ((*x)[1].children()[1].children()[0].leaf().string_at(0), "c");
  EXPECT_FLOAT_EQ((*x)[1].children()[1].children()[1].leaf().data<float>()[3], 8.f);
}

TEST(ExperimentalDistributeDatasetTest, RebatchSizesTableEndToEnd) {
  // For every (B, W, R, w): OFF gives worker w the sizes BatchSizesForWorker(B, W, R, w) in
  // turn, R per step, over two full global batches.
  for (int64_t b : {1, 3, 4, 7, 8, 10}) {
    for (int64_t w_count : {1, 2, 3}) {
      for (int64_t r : {1, 2, 3}) {
        const int64_t n = w_count * r;
        if (n == 1) continue;  // no rebatch with one replica
        for (int64_t w = 0; w < w_count; ++w) {
          absl::StatusOr<std::vector<int64_t>> sizes = BatchSizesForWorker(b, w_count, r, w);
          ASSERT_TRUE(sizes.ok());
          Int64Steps steps = RunInt64(Distribute(
              Strategy(static_cast<int>(r), w_count, w),
              ParseOrDie("range(" + std::to_string(2 * b) + ").batch(" + std::to_string(b) + ")"),
              AutoShardPolicy::kOff));
          // Two batches are 2N pieces, i.e. 2W steps of R pieces; after them only size-0 pieces
          // (TF's rebatch still emits the size-0 pieces of a cycle at the end of its input).
          ASSERT_GE(static_cast<int64_t>(steps.size()), 2 * w_count)
              << "B=" << b << " W=" << w_count << " R=" << r << " w=" << w;
          int64_t k = 0, total = 0;
          for (const auto& step : steps) {
            for (const auto& piece : step) {
              int64_t expected = k < 2 * n ? (*sizes)[k % n] : 0;
              EXPECT_EQ(static_cast<int64_t>(piece.size()), expected)
                  << "B=" << b << " W=" << w_count << " R=" << r << " w=" << w << " piece " << k;
              total += static_cast<int64_t>(piece.size());
              ++k;
            }
          }
          EXPECT_EQ(total, 2 * b);
        }
      }
    }
  }
}

TEST(ExperimentalDistributeDatasetTest, UnbatchedInputIsAnError) {
  absl::StatusOr<DistributedDataset> dist =
      Strategy(2).ExperimentalDistributeDataset(ParseOrDie("range(10)"));
  EXPECT_EQ(dist.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dist.status().message(),
              HasSubstr("Call the `batch` method on the input Dataset in order to be able to "
                        "split your input across 2 replicas"));
  // One replica: TF does not rebatch, so an unbatched dataset is fine.
  EXPECT_EQ(RunInt64(Distribute(Strategy(1), ParseOrDie("range(3)"))),
            (Int64Steps{{{0}}, {{1}}, {{2}}}));
}

TEST(ExperimentalDistributeDatasetTest, OptionErrors) {
  InputOptions per_replica;
  per_replica.experimental_replication_mode = InputReplicationMode::kPerReplica;
  EXPECT_EQ(Strategy(2).ExperimentalDistributeDataset(ParseOrDie("range(4).batch(2)"),
                                                      per_replica)
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
  InputOptions on_device;
  on_device.experimental_place_dataset_on_device = true;
  absl::StatusOr<DistributedDataset> r =
      Strategy(2).ExperimentalDistributeDataset(ParseOrDie("range(4).batch(2)"), on_device);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("PER_REPLICA"));
  absl::StatusOr<DistributedDataset> invalid =
      Strategy(2).ExperimentalDistributeDataset(ParseOrDie("range(4)").Batch(0));
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Auto-sharding and several workers.

TEST(MultiWorkerTest, DataShardingTfSemanticsExample) {
  for (AutoShardPolicy policy : {AutoShardPolicy::kData, AutoShardPolicy::kAuto}) {
    EXPECT_THAT(RunInt64(Distribute(Strategy(1, 2, 0), ParseOrDie("range(12).batch(4)"), policy)),
                ElementsAre(ElementsAre(ElementsAre(0, 1)), ElementsAre(ElementsAre(4, 5)),
                            ElementsAre(ElementsAre(8, 9))));
    EXPECT_THAT(RunInt64(Distribute(Strategy(1, 2, 1), ParseOrDie("range(12).batch(4)"), policy)),
                ElementsAre(ElementsAre(ElementsAre(2, 3)), ElementsAre(ElementsAre(6, 7)),
                            ElementsAre(ElementsAre(10, 11))));
  }
}

TEST(MultiWorkerTest, WorkerOutOfDataGetsDummiesWhileAnotherHasData) {
  // FILE: worker 0 reads files 0 and 2 (5 + 4 lines), worker 1 file 1 (2 lines). B=4, W=2,
  // R=2: one element per replica per step; worker 1 runs out after one step but gets dummy
  // steps until worker 0 is done (5 steps), as TF's all-reduce decides.
  std::vector<std::string> files = WriteFiles("uneven", {5, 2, 4});
  std::string expr = "text_line_dataset(['" + files[0] + "', '" + files[1] + "', '" + files[2] +
                     "']).batch(4)";
  for (int64_t w : {0, 1}) {
    DistributedDataset dist = Distribute(Strategy(2, 2, w), ParseOrDie(expr),
                                         AutoShardPolicy::kFile);
    EXPECT_EQ(ShapeOf(dist.element_spec()), "(None,)");
    absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
    ASSERT_TRUE(it.ok());
    std::vector<std::vector<std::string>> steps;
    for (int s = 0; s < 100; ++s) {
      absl::StatusOr<PerReplica<Element>> x = it->GetNext();
      if (!x.ok()) {
        EXPECT_TRUE(absl::IsOutOfRange(x.status())) << x.status();
        break;
      }
      std::vector<std::string> step;
      for (const Element& e : *x) {
        const Tensor& t = e.leaf();
        EXPECT_EQ(t.dtype(), DType::kString);
        step.push_back(t.num_elements() == 0 ? "-" : t.string_at(0));
      }
      steps.push_back(step);
    }
    if (w == 0) {
      EXPECT_THAT(steps, ElementsAre(ElementsAre("0", "1"), ElementsAre("2", "3"),
                                     ElementsAre("4", "7"), ElementsAre("8", "9"),
                                     ElementsAre("10", "-")));
    } else {
      EXPECT_THAT(steps, ElementsAre(ElementsAre("5", "6"), ElementsAre("-", "-"),
                                     ElementsAre("-", "-"), ElementsAre("-", "-"),
                                     ElementsAre("-", "-")));
    }
  }
}

TEST(MultiWorkerTest, HintPolicyShardsWhereThePlaceholderIs) {
  Int64Steps steps = RunInt64(Distribute(
      Strategy(1, 3, 1), ParseOrDie("range(12).shard(SHARD_HINT, SHARD_HINT).batch(2)"),
      AutoShardPolicy::kHint));
  std::vector<int64_t> all;
  for (const auto& step : steps) {
    for (const auto& piece : step) all.insert(all.end(), piece.begin(), piece.end());
  }
  EXPECT_THAT(all, ElementsAre(1, 4, 7, 10));
}

TEST(MultiWorkerTest, InfiniteDatasetKeepsStaticSpecAndDoesNotRunOtherWorkers) {
  DistributedDataset dist =
      Distribute(Strategy(2, 2, 1), ParseOrDie("range(8).repeat().batch(4, drop_remainder=True)"),
                 AutoShardPolicy::kOff);
  EXPECT_EQ(ShapeOf(dist.element_spec()), "(1,)");
  Int64Steps steps = RunInt64(dist, 3);
  // Worker 1's sizes for B=4, N=4 are all 1; its pieces are 0,1 | 2,3 | 4,5 (OFF: every worker
  // reads everything).
  EXPECT_THAT(steps, ElementsAre(ElementsAre(ElementsAre(0), ElementsAre(1)),
                                 ElementsAre(ElementsAre(2), ElementsAre(3)),
                                 ElementsAre(ElementsAre(4), ElementsAre(5))));
}

// Every element of a finite dataset reaches exactly one replica of one worker (DATA, FILE),
// all workers see the end of data at the same step, and no step is all dummies.
TEST(MultiWorkerTest, ExactlyOnceAndSynchronousEndForManyLayouts) {
  int cases = 0;
  for (int64_t n : {0, 1, 5, 13, 24}) {
    for (int64_t b : {1, 2, 5, 8}) {
      for (int64_t w_count : {1, 2, 3}) {
        for (int64_t r : {1, 2, 4}) {
          for (AutoShardPolicy policy : {AutoShardPolicy::kData, AutoShardPolicy::kFile}) {
            Dataset ds = ParseOrDie("range(" + std::to_string(n) + ").batch(" +
                                    std::to_string(b) + ")");
            if (policy == AutoShardPolicy::kFile) {
              // n elements over 3 files of sizes about n/3, values 0..n-1.
              std::vector<int> lines = {static_cast<int>(n / 3), static_cast<int>(n / 3),
                                        static_cast<int>(n - 2 * (n / 3))};
              std::vector<std::string> files = WriteFiles(
                  "exactly_once_" + std::to_string(n), lines);
              ds = Dataset::TextLine(files).Batch(b);
            }
            ++cases;
            std::map<std::string, int> seen;
            size_t num_steps = 0;
            for (int64_t w = 0; w < w_count; ++w) {
              DistributedDataset dist = Distribute(Strategy(static_cast<int>(r), w_count, w), ds,
                                                   policy);
              absl::StatusOr<DistributedIterator> it = dist.MakeIterator();
              ASSERT_TRUE(it.ok()) << it.status();
              size_t steps = 0;
              for (; steps < 1000; ++steps) {
                absl::StatusOr<PerReplica<Element>> x = it->GetNext();
                if (!x.ok()) {
                  ASSERT_TRUE(absl::IsOutOfRange(x.status())) << x.status();
                  break;
                }
                ASSERT_EQ(x->num_replicas(), static_cast<size_t>(r));
                for (const Element& e : *x) {
                  const Tensor& t = e.leaf();
                  for (int64_t i = 0; i < t.num_elements(); ++i) {
                    ++seen[t.dtype() == DType::kString ? t.string_at(i)
                                                        : std::to_string(t.data<int64_t>()[i])];
                  }
                }
              }
              if (w == 0) num_steps = steps;
              EXPECT_EQ(steps, num_steps) << "workers disagree on the number of steps";
            }
            const std::string where = "n=" + std::to_string(n) + " B=" + std::to_string(b) +
                                      " W=" + std::to_string(w_count) + " R=" +
                                      std::to_string(r) + " policy=" +
                                      std::string(AutoShardPolicyName(policy));
            ASSERT_EQ(static_cast<int64_t>(seen.size()), n) << where;
            for (int64_t v = 0; v < n; ++v) {
              EXPECT_EQ(seen[std::to_string(v)], 1) << where << " value " << v;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

TEST(MultiWorkerTest, FileShardingWithTooFewFilesFailsAtDistributeTime) {
  std::vector<std::string> files = WriteFiles("too_few", {4});
  absl::StatusOr<DistributedDataset> dist = Strategy(1, 2, 0).ExperimentalDistributeDataset(
      Dataset::TextLine(files).Batch(2), InputOptions{});
  EXPECT_EQ(dist.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dist.status().message(),
              HasSubstr("Could not apply FILE based sharding: the dataset only has 1 file(s), "
                        "which is not enough for the required 2 shards/workers"));
}

// ---------------------------------------------------------------------------------------------
// distribute_datasets_from_function.

TEST(DistributeDatasetsFromFunctionTest, CallsFnOncePerPipelineWithItsContext) {
  std::vector<InputContext> contexts;
  auto fn = [&](const InputContext& ctx) -> absl::StatusOr<Dataset> {
    contexts.push_back(ctx);
    absl::StatusOr<int64_t> per_replica = ctx.GetPerReplicaBatchSize(8);
    if (!per_replica.ok()) return per_replica.status();
    return Dataset::Range(24)
        .Shard(ctx.num_input_pipelines(), ctx.input_pipeline_id())
        .Batch(*per_replica);
  };
  MirroredStrategy strategy = Strategy(2, 2, 1);
  absl::StatusOr<DistributedDataset> dist = strategy.DistributeDatasetsFromFunction(fn);
  ASSERT_TRUE(dist.ok()) << dist.status();
  ASSERT_EQ(contexts.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(contexts[i].num_input_pipelines(), 2);
    EXPECT_EQ(contexts[i].input_pipeline_id(), i);
    EXPECT_EQ(contexts[i].num_replicas_in_sync(), 4);
  }
  // Worker 1 reads shard 1 (1, 3, 5, ...) in batches of 2, consecutive batches to its replicas.
  Int64Steps steps = RunInt64(*dist);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_THAT(steps[0], ElementsAre(ElementsAre(1, 3), ElementsAre(5, 7)));
  EXPECT_THAT(steps[2], ElementsAre(ElementsAre(17, 19), ElementsAre(21, 23)));
  // Multi-worker, finite: the batch dimension is None.
  EXPECT_EQ(ShapeOf(dist->element_spec()), "(None,)");
}

TEST(DistributeDatasetsFromFunctionTest, PartialStepsAsTfHandlesThem) {
  auto fixed = [](std::string expr) {
    return [expr](const InputContext&) -> absl::StatusOr<Dataset> { return Dataset::Parse(expr); };
  };
  // Dynamic shapes: the partial step is padded with a size-0 dummy.
  absl::StatusOr<DistributedDataset> dynamic =
      Strategy(2).DistributeDatasetsFromFunction(fixed("range(7).batch(2)"));
  ASSERT_TRUE(dynamic.ok());
  EXPECT_EQ(ShapeOf(dynamic->element_spec()), "(None,)");
  EXPECT_THAT(RunInt64(*dynamic), ElementsAre(ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)),
                                              ElementsAre(ElementsAre(4, 5), ElementsAre(6))));
  // Fully static shapes on one worker: TF turns partial-batch handling off and get_next ends at
  // the partial step ([4, 5] is never delivered) ...
  absl::StatusOr<DistributedDataset> fixed_shape =
      Strategy(2).DistributeDatasetsFromFunction(fixed("range(6).batch(2, drop_remainder=True)"));
  ASSERT_TRUE(fixed_shape.ok());
  EXPECT_EQ(ShapeOf(fixed_shape->element_spec()), "(2,)");
  EXPECT_THAT(RunInt64(*fixed_shape),
              ElementsAre(ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3))));
  // ... while get_next_as_optional still pads it, with the batch dimension set to 0.
  absl::StatusOr<DistributedIterator> it = fixed_shape->MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE(it->GetNextAsOptional().ok());
  absl::StatusOr<std::optional<PerReplica<Element>>> last = it->GetNextAsOptional();
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_THAT(Int64Values((**last)[0].leaf()), ElementsAre(4, 5));
  EXPECT_EQ((**last)[1].leaf().shape(), Shape({0}));
  absl::StatusOr<std::optional<PerReplica<Element>>> end = it->GetNextAsOptional();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST(DistributeDatasetsFromFunctionTest, PerReplicaModeGivesEachReplicaItsPipeline) {
  InputOptions options;
  options.experimental_replication_mode = InputReplicationMode::kPerReplica;
  std::vector<int64_t> ids;
  absl::StatusOr<DistributedDataset> dist = Strategy(2).DistributeDatasetsFromFunction(
      [&](const InputContext& ctx) -> absl::StatusOr<Dataset> {
        ids.push_back(ctx.input_pipeline_id());
        EXPECT_EQ(ctx.num_input_pipelines(), 2);
        return Dataset::Range(ctx.input_pipeline_id() * 100, ctx.input_pipeline_id() * 100 + 3)
            .Batch(2);
      },
      options);
  ASSERT_TRUE(dist.ok()) << dist.status();
  EXPECT_THAT(ids, ElementsAre(0, 1));
  EXPECT_THAT(RunInt64(*dist),
              ElementsAre(ElementsAre(ElementsAre(0, 1), ElementsAre(100, 101)),
                          ElementsAre(ElementsAre(2), ElementsAre(102))));
}

TEST(DistributeDatasetsFromFunctionTest, FnErrorsPropagate) {
  absl::StatusOr<DistributedDataset> dist = Strategy(3).DistributeDatasetsFromFunction(
      [](const InputContext& ctx) -> absl::StatusOr<Dataset> {
        absl::StatusOr<int64_t> b = ctx.GetPerReplicaBatchSize(8);  // 8 % 3 != 0
        if (!b.ok()) return b.status();
        return Dataset::Range(10).Batch(*b);
      });
  EXPECT_EQ(dist.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dist.status().message(), HasSubstr("not divisible"));
}

}  // namespace
}  // namespace sluice
