#!/usr/bin/env python3
"""Generates tests/testdata/distribute/: what tf.distribute gives for a table of pipelines, in the
JSON formats of `sluicectl run --format=json` and `sluicectl element-spec --format=json`.

Developer tooling only: the build and the tests never run TensorFlow. Run it from the repository
root with the TF venv (tensorflow-cpu 2.15):

  /tmp/tfvenv/bin/python tools/golden/gen_distribute_goldens.py

Writes, for every case of CASES:
  <case>.jsonl       one line per step: {"step": 0, "per_replica": [V0, V1, ...]}, V_r the value
                     of local replica r: a tensor is {"dtype": "float32", "shape": [2, 1],
                     "values": [[1.0], [1.0]]}, a tuple or list a JSON array, a dict an object.
                     Strings are UTF-8 text. At most max_steps lines for an infinite dataset.
  <case>.spec.json   the element_spec: the element's structure with, at each leaf,
                     {"per_replica": [{"dtype": "float32", "shape": [null, 1]}, ...]}.
and index.json: the list of cases (name, expression, api, devices, num_workers, worker_index,
policy, replication_mode, max_steps, and for a case that must fail: "error", TF's message, and
"error_contains", its first sentence, which Sluice's error must contain).

How each case is produced:
  * One worker (num_workers == 1): a real tf.distribute.MirroredStrategy over `devices` logical
    CPU devices, experimental_distribute_dataset(dataset.with_options(policy)) or
    distribute_datasets_from_function(lambda ctx: dataset, options). TF does not wrap the values
    of a one-device strategy in PerReplica; they are written as a one-replica list anyway.
  * Several workers: MultiWorkerMirroredStrategy needs one process per worker, so the per-worker
    dataset is built with TF's own pieces exactly as input_lib.py builds it for an input worker
    (distribute.compute_batch_size, batch_sizes_for_worker, Dataset.rebatch or
    _LegacyRebatchDataset, prefetch, input_ops.auto_shard_dataset, whose grappler rewrite is
    TF's), and the distributed iterator's lockstep is replayed here from input_lib.py's logic:
    the elements of each worker's dataset go to its replicas in turn; a step exists while any
    replica of any worker has a value; replicas without one get TF's dummy (unknown dimensions
    and, for fully static shapes, dimension 0 set to 0). The spec is input_lib's: the worker's
    rebatched element_spec per replica, made dynamic (_rebatch_as_dynamic) when partial-batch
    handling is on (a dataset not known to be infinite).
Files for text_line_dataset cases are tests/testdata/distribute/files/*.txt (written here).
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.data.experimental.ops import distribute as tf_distribute  # noqa: E402
from tensorflow.python.data.experimental.ops import cardinality as cardinality_lib  # noqa: E402
from tensorflow.python.distribute import input_lib  # noqa: E402
from tensorflow.python.distribute import input_ops  # noqa: E402
from tensorflow.python.distribute import values as tf_values  # noqa: E402

OUT = os.path.join("tests", "testdata", "distribute")
FILES = os.path.join(OUT, "files")
MAX_DEVICES = 8

F = [os.path.join(FILES, "f%d.txt" % i) for i in range(4)]
FILE_LINES = {
    F[0]: ["a0", "a1", "a2", "a3", "a4"],
    F[1]: ["b0", "b1", "b2"],
    F[2]: ["c0", "c1", "c2", "c3"],
    F[3]: ["d0"],
}


def files(*idx):
  return "[" + ", ".join("'%s'" % F[i] for i in idx) + "]"


def case(name, expr, devices, api="distribute_dataset", num_workers=1, worker_index=0,
         policy="AUTO", replication_mode="PER_WORKER", max_steps=64):
  return dict(name=name, expression=expr, api=api, devices=devices, num_workers=num_workers,
              worker_index=worker_index, policy=policy, replication_mode=replication_mode,
              max_steps=max_steps)


CASES = [
    # The seed's examples.
    case("seed_for_loop", "from_tensors(([1.], [1.])).repeat(4).batch(4)", 2),
    case("seed_explicit_iterator", "from_tensors(([1.], [1.])).repeat(50).batch(4)", 2),
    case("seed_input_signature", "from_tensors(([2.])).repeat(100).batch(4)", 2),
    case("seed_element_spec", "from_tensors(([1.], [2])).repeat(100).batch(16)", 2),
    case("seed_iter", "from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)", 2, max_steps=3),
    # Rebatching: AUTO on a non-file source is DATA, i.e. TF's legacy split even on one worker;
    # OFF keeps the new-style rebatch with batch_sizes_for_worker.
    case("range8_b4_r3_auto", "range(8).batch(4)", 3),
    case("range8_b4_r3_off", "range(8).batch(4)", 3, policy="OFF"),
    case("range8_b4_r3_data", "range(8).batch(4)", 3, policy="DATA"),
    case("range9_b4_r2", "range(9).batch(4)", 2),
    case("range9_b4_drop_r2", "range(9).batch(4, drop_remainder=True)", 2),
    case("range9_b3_drop_r2", "range(9).batch(3, drop_remainder=True)", 2),
    case("range10_b5_r4_auto", "range(10).batch(5)", 4),
    case("range10_b5_r4_off", "range(10).batch(5)", 4, policy="OFF"),
    case("range10_b4_r3_off", "range(10).batch(4)", 3, policy="OFF"),
    case("range3_b2_r3", "range(3).batch(2)", 3),
    case("range8_b2_r3_off", "range(8).batch(2)", 3, policy="OFF"),
    case("range7_b7_r2_r4_off", "range(14).batch(7)", 4, policy="OFF"),
    case("range16_b8_drop_r4", "range(16).batch(8, drop_remainder=True)", 4),
    case("range1_b4_r3", "range(1).batch(4)", 3),
    case("range0_b4_r2", "range(0).batch(4)", 2),
    case("take_r4", "range(20).batch(6).take(3)", 4, policy="OFF"),
    case("repeat2_r2", "range(5).batch(3).repeat(2)", 2),
    case("prefetch_end_r3", "range(10).batch(4).prefetch(2)", 3),
    case("user_rebatch_r2", "range(10).batch(4).rebatch(3)", 2),
    case("unbatched_vector_r2", "from_tensors([1., 2., 3., 4.]).repeat(3)", 2),
    case("one_device_batched", "range(5).batch(2)", 1),
    case("one_device_unbatched", "range(5)", 1),
    # Structures.
    case("dict_r2", "from_tensor_slices({'a': [1, 2, 3, 4, 5], 'b': [[1.], [2.], [3.], [4.], "
         "[5.]]}).batch(2)", 2),
    case("nested_tuple_r2", "from_tensor_slices(([1, 2, 3, 4, 5, 6], (['a', 'b', 'c', 'd', 'e', "
         "'f'], [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]))).batch(3)", 2),
    case("dict_drop_r2", "from_tensor_slices({'x': [[1, 2], [3, 4], [5, 6], [7, 8]], 'y': [1., "
         "2., 3., 4.]}).batch(2, drop_remainder=True)", 2),
    case("floats_bools_r2", "from_tensor_slices(([0.1, 0.7, 1.5e-05, 3.25, 1e20], [True, False, "
         "True, True, False])).batch(3)", 2),
    # File sources: AUTO means FILE (a no-op shard on one worker), so the new-style rebatch stays.
    case("text_auto_r3", "text_line_dataset(%s).batch(4)" % files(0, 1), 3),
    case("text_data_r3", "text_line_dataset(%s).batch(4)" % files(0, 1), 3, policy="DATA"),
    case("hint_one_worker_r2", "range(12).shard(SHARD_HINT, SHARD_HINT).batch(4)", 2,
         policy="HINT"),
    # distribute_datasets_from_function: no rebatching; elements go to the replicas in turn.
    case("fn_range7_b2_r2", "range(7).batch(2)", 2, api="from_function"),
    case("fn_static_partial_r2", "range(6).batch(2, drop_remainder=True)", 2,
         api="from_function"),
    case("fn_dict_r3", "from_tensor_slices({'a': [1, 2, 3, 4, 5]}).batch(2)", 3,
         api="from_function"),
    case("fn_unbatched_r2", "range(5)", 2, api="from_function"),
    case("fn_per_replica_r2", "range(5).batch(2)", 2, api="from_function",
         replication_mode="PER_REPLICA"),
    # Several workers (per-worker view; see the module comment).
    case("data_w2_r1_w0", "range(12).batch(4)", 1, num_workers=2, worker_index=0, policy="DATA"),
    case("data_w2_r1_w1", "range(12).batch(4)", 1, num_workers=2, worker_index=1, policy="DATA"),
    case("auto_w2_r2_w0", "range(20).batch(8)", 2, num_workers=2, worker_index=0),
    case("auto_w2_r2_w1", "range(20).batch(8)", 2, num_workers=2, worker_index=1),
    case("data_w2_r2_w0", "range(10).batch(3)", 2, num_workers=2, worker_index=0, policy="DATA"),
    case("data_w2_r2_w1", "range(10).batch(3)", 2, num_workers=2, worker_index=1, policy="DATA"),
    case("off_w2_r2_w0", "range(14).batch(7)", 2, num_workers=2, worker_index=0, policy="OFF"),
    case("off_w2_r2_w1", "range(14).batch(7)", 2, num_workers=2, worker_index=1, policy="OFF"),
    case("off_w3_r1_w2", "range(10).batch(3)", 1, num_workers=3, worker_index=2, policy="OFF"),
    case("file_w2_r2_w0", "text_line_dataset(%s).batch(4)" % files(0, 1, 2), 2, num_workers=2,
         worker_index=0, policy="FILE"),
    case("file_w2_r2_w1", "text_line_dataset(%s).batch(4)" % files(0, 1, 2), 2, num_workers=2,
         worker_index=1, policy="FILE"),
    case("autofile_w2_r1_w1", "text_line_dataset(%s).batch(2)" % files(0, 3), 1, num_workers=2,
         worker_index=1),
    case("file_too_few_w2", "text_line_dataset(%s).batch(2)" % files(0), 1, num_workers=2,
         worker_index=0, policy="FILE"),
    case("hint_w3_r1_w1", "range(30).shard(SHARD_HINT, SHARD_HINT).batch(6)", 1, num_workers=3,
         worker_index=1, policy="HINT"),
    case("infinite_w2_r2_w1", "range(8).repeat().batch(4, drop_remainder=True)", 2,
         num_workers=2, worker_index=1, policy="OFF", max_steps=4),
    case("infinite_data_w2_r2_w0", "range(8).repeat().batch(4)", 2, num_workers=2,
         worker_index=0, policy="DATA", max_steps=4),
]


class _Sources:
  range = staticmethod(tf.data.Dataset.range)
  from_tensors = staticmethod(tf.data.Dataset.from_tensors)
  from_tensor_slices = staticmethod(tf.data.Dataset.from_tensor_slices)
  text_line_dataset = staticmethod(tf.data.TextLineDataset)


def make_dataset(expr, policy):
  ds = eval("S." + expr, {"S": _Sources, "SHARD_HINT": tf.data.experimental.SHARD_HINT})  # noqa
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = getattr(
      tf.data.experimental.AutoShardPolicy, policy)
  return ds.with_options(options)


def tensor_json(t):
  t = tf.convert_to_tensor(t)
  values = t.numpy().tolist() if t.shape.rank else t.numpy().item()

  def fix(v):
    if isinstance(v, list):
      return [fix(x) for x in v]
    if isinstance(v, bytes):
      return v.decode("utf-8")
    if isinstance(v, float):
      return float(v)
    return v
  if t.dtype.is_floating:
    # The shortest digits that read back to the same value of the tensor's own type (float16
    # and bfloat16 widened to float32), as core/format/json_format.h writes them: float32 0.7 is 0.7.
    arr = np.asarray(t.numpy())
    if t.dtype != tf.float64:
      arr = arr.astype(np.float32)
      values = np.vectorize(lambda x: float(repr(np.float32(x))), otypes=[np.float64])(arr)
      values = values.tolist() if arr.ndim else float(values)
    else:
      values = arr.tolist()
  return {"dtype": t.dtype.name, "shape": list(t.shape), "values": fix(values)}


def nest_json(value, leaf):
  if isinstance(value, dict):
    return {k: nest_json(v, leaf) for k, v in value.items()}
  if isinstance(value, (tuple, list)):
    return [nest_json(v, leaf) for v in value]
  return leaf(value)


def spec_json(spec):
  return {"dtype": spec.dtype.name, "shape": spec.shape.as_list()}


def per_replica_spec_json(spec, replicas):
  def leaf(s):
    if isinstance(s, tf_values.PerReplicaSpec):
      return {"per_replica": [spec_json(v) for v in s._value_specs]}  # pylint: disable=protected-access
    return {"per_replica": [spec_json(s)] * replicas}
  return nest_json(spec, leaf)


def replica_values(x, replicas):
  """The list of per-replica element nests of one step."""
  out = []
  for r in range(replicas):
    def pick(v, r=r):
      if isinstance(v, tf_values.PerReplica):
        return v.values[r]
      assert replicas == 1, type(v)
      return v
    out.append(nest_json(tf.nest.map_structure(pick, x, expand_composites=False),
                         tensor_json))
  return out


def run_one_worker(c):
  devices = ["CPU:%d" % i for i in range(c["devices"])]
  strategy = tf.distribute.MirroredStrategy(devices)
  policy = c["policy"]
  if c["api"] == "distribute_dataset":
    dist = strategy.experimental_distribute_dataset(make_dataset(c["expression"], policy))
  else:
    mode = getattr(tf.distribute.InputReplicationMode, c["replication_mode"])
    options = tf.distribute.InputOptions(experimental_replication_mode=mode)
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: make_dataset(c["expression"], policy), options)
  steps = []
  for x in dist:
    steps.append(replica_values(x, c["devices"]))
    if len(steps) >= c["max_steps"]:
      break
  return steps, per_replica_spec_json(dist.element_spec, c["devices"])


def worker_dataset(dataset, num_workers, worker_index, num_replicas):
  """input_lib.DistributedDataset's per-worker dataset, as built for an input worker."""
  replicas = num_replicas // num_workers
  batch_size = tf_distribute.compute_batch_size(dataset)
  if int(batch_size) != -1:
    sizes = tf_distribute.batch_sizes_for_worker(batch_size, num_workers, replicas, worker_index)
    ds = dataset.rebatch(sizes).prefetch(replicas)
  else:
    ds = tf_distribute._LegacyRebatchDataset(dataset, num_replicas).prefetch(replicas)  # pylint: disable=protected-access
  return input_ops.auto_shard_dataset(ds, num_workers, worker_index, num_replicas)


def dummy(spec):
  dims = [d if d is not None else 0 for d in spec.shape.as_list()]
  if dims and spec.shape.is_fully_defined():
    dims[0] = 0
  return tf.zeros(dims, spec.dtype)


def run_multi_worker(c):
  w_count, own, replicas = c["num_workers"], c["worker_index"], c["devices"]
  n = w_count * replicas
  dataset = make_dataset(c["expression"], c["policy"])
  cardinality = int(dataset.cardinality())
  handling = cardinality != cardinality_lib.INFINITE
  datasets = [worker_dataset(dataset, w_count, w, n) for w in range(w_count)]
  spec = datasets[own].element_spec
  dist_spec = tf.nest.map_structure(lambda s: tf_values.PerReplicaSpec(*([s] * replicas)), spec)
  if handling:
    dist_spec = tf.nest.map_structure(input_lib._rebatch_as_dynamic, dist_spec)  # pylint: disable=protected-access
  iterators = [iter(d) for d in datasets]
  ended = [False] * w_count
  steps = []
  while len(steps) < c["max_steps"]:
    got = []
    for w in range(w_count):
      vals = []
      for _ in range(replicas):
        v = None
        if not ended[w]:
          try:
            v = next(iterators[w])
          except StopIteration:
            ended[w] = True
        vals.append(v)
      got.append(vals)
    if not any(v is not None for vals in got for v in vals):
      break
    if not handling and any(v is None for vals in got for v in vals):
      break
    mine = [v if v is not None else tf.nest.map_structure(dummy, spec) for v in got[own]]
    steps.append([nest_json(v, tensor_json) for v in mine])
  return steps, per_replica_spec_json(dist_spec, replicas)


def main():
  cpus = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpus[0], [tf.config.LogicalDeviceConfiguration()] * MAX_DEVICES)
  os.makedirs(FILES, exist_ok=True)
  for path, lines in FILE_LINES.items():
    with open(path, "w") as f:
      f.write("".join(line + "\n" for line in lines))
  only = set(sys.argv[1:])
  index = []
  for c in CASES:
    if only and c["name"] not in only:
      continue
    entry = dict(c)
    try:
      if c["num_workers"] == 1:
        steps, spec = run_one_worker(c)
      else:
        steps, spec = run_multi_worker(c)
    except (tf.errors.OpError, ValueError) as e:
      message = getattr(e, "message", str(e))
      # Drop TF's "{{function_node ...}}" prefix and " [Op:...]" suffix; keep the first sentence
      # as what the C++ test looks for.
      if "}} " in message:
        message = message.split("}} ", 1)[1]
      message = message.split(" [Op:", 1)[0]
      entry["error"] = message
      entry["error_contains"] = message.split(".", 1)[0]
      index.append(entry)
      print("%-28s error: %s" % (c["name"], entry["error"][:100]))
      continue
    with open(os.path.join(OUT, c["name"] + ".jsonl"), "w") as f:
      for i, s in enumerate(steps):
        f.write(json.dumps({"step": i, "per_replica": s}) + "\n")
    with open(os.path.join(OUT, c["name"] + ".spec.json"), "w") as f:
      f.write(json.dumps(spec) + "\n")
    index.append(entry)
    print("%-28s %d steps" % (c["name"], len(steps)))
  if not only:
    with open(os.path.join(OUT, "index.json"), "w") as f:
      json.dump({"generator": "tools/golden/gen_distribute_goldens.py",
                 "tensorflow": tf.__version__, "cases": index}, f, indent=1)
      f.write("\n")


if __name__ == "__main__":
  main()
