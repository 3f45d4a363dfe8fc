// A seeded random generator of finite pipelines and service layouts for the differential
// conformance test (issue 12): every case is a pipeline expression (core/data/pipeline_parser.h) and
// how to read it through the service, and names the in-process layout that must give the same
// per-replica values.
//
//   ConformanceCase c = GenerateCase(/*seed=*/17, {.text_files = {"/tmp/a.txt"}});
//   // c.pipeline: "from_tensor_slices({'a': [3, 1, 4], 'b': [[1.5, 2.0], ...]}).batch(2)..."
//
// What it draws: a source (range with start/stop/step, from_tensor_slices of ints, of vectors,
// of a dict or a tuple, from_tensors, text_line_dataset, tf_record_dataset with parse_example
// before or after the batch), element ops (repeat, take, skip,
// shard, seeded shuffle, map(cast), filter, prefetch, a SHARD_HINT placeholder), one batch or
// padded_batch with or without drop_remainder, then ops after the batch (map(cast) after batch,
// repeat, take, skip, prefetch, unbatch().batch(k), rebatch(k)); 1-4 replicas, 1 or 2
// consumers, a sharding policy, a number of tasks, independent reads and resumes. Every
// pipeline is finite and small (at most a few hundred elements).
//
// Deterministic: the same seed gives the same case on every machine (its own PRNG, no
// std::*_distribution). Thread-safe (pure).
#ifndef SLUICE_TESTS_CONFORMANCE_PIPELINE_GENERATOR_H_
#define SLUICE_TESTS_CONFORMANCE_PIPELINE_GENERATOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

struct GeneratorOptions {
  // Files text_line_dataset sources may read (none: no text sources are drawn).
  std::vector<std::string> text_files;
  // TFRecord files of tf.train.Examples with features 'label' (int64 []), 'bbox' (float [2])
  // and 'name' (string []), for tf_record_dataset(...).batch(b).map(parse_example(...)).
  std::vector<std::string> record_files;
};

struct ConformanceCase {
  uint64_t seed = 0;
  std::string pipeline;
  int64_t replicas = 1;   // per consumer
  int64_t consumers = 1;  // coordinated consumers (see RunLocal for what each is compared with)
  // "DATA", "AUTO", "OFF", "FILE", "HINT", "RANGES", "DYNAMIC".
  std::string policy = "DATA";
  // The in-process auto-shard policy the service's output must equal ("DATA", "AUTO", ...).
  std::string local_policy = "DATA";
  int64_t num_tasks = 1;
  bool independent = false;
  // Resume after this many steps from the iterator's checkpoint (0: no resume).
  int64_t resume_after = 0;
  // DYNAMIC: only the multiset of elements is compared.
  bool multiset_only = false;

  // One line: seed, layout, policy and the pipeline, for failure messages.
  std::string Describe() const;
};

ConformanceCase GenerateCase(uint64_t seed, const GeneratorOptions& options = {});

}  // namespace sluice

#endif  // SLUICE_TESTS_CONFORMANCE_PIPELINE_GENERATOR_H_
