#!/usr/bin/env python3
"""Generates tests/testdata/distribute/: what tf.distribute gives for a table of pipelines, in the
JSON formats of `sluicectl run --format=json` and `sluicectl element-spec --format=json`.

Developer tooling only: the build and the tests never run TensorFlow. Run it from the repository
root with the TF venv (tensorflow-cpu 2.15):

  /tmp/tfvenv/bin/python tools/golden/gen_distribute_goldens.py

Writes, for every case of CASES, what TF gives, never reshaped into Sluice's form:
  <case>.jsonl       one line per step. Where TF gives PerReplica values (more than one local
                     replica, or a multi-worker strategy):
                       {"step": 0, "per_replica": [V0, V1, ...]}, V_r the value of local replica r;
                     where TF gives the plain element (one device, one worker: TF does not wrap
                     it, input_lib._always_wrap):
                       {"step": 0, "value": V}.
                     A tensor is {"dtype": "float32", "shape": [2, 1], "values": [[1.0], [1.0]]},
                     a tuple or list a JSON array, a dict an object. Strings are UTF-8 text. At
                     most max_steps lines for an infinite dataset.
  <case>.spec.json   the element_spec: the element's structure with, at each leaf,
                     {"per_replica": [{"dtype": "float32", "shape": [null, 1]}, ...]} where TF's
                     leaf is a PerReplicaSpec, or {"dtype": "float32", "shape": [null, 1]} where
                     it is a plain TensorSpec (one device, one worker).
and index.json: the list of cases (name, expression, api, devices, num_workers, worker_index,
policy, replication_mode, max_steps, "oracle": which program produced the case (see below), and
for a case that must fail: "error", TF's message, and "error_contains", its first sentence,
which Sluice's error must contain).

How each case is produced ("oracle" in index.json):
  * "MirroredStrategy": one worker (num_workers == 1): a real tf.distribute.MirroredStrategy
    over `devices` logical CPU devices, experimental_distribute_dataset(dataset.with_options(
    policy)) or distribute_datasets_from_function(lambda ctx: dataset, options); its values and
    element_spec written as TF returns them.
  * "MultiWorkerMirroredStrategy": several workers with one device each: a real
    tf.distribute.MultiWorkerMirroredStrategy, one process of this script per worker, on
    loopback through TF_CONFIG (ports picked free here); the case's worker_index process writes
    what its DistributedDataset gives. This is TF's distributed iterator end to end (its
    cross-worker "any has data" all-reduce included).
  * "input_lib replay": several workers with more than one device each. TF's
    MultiWorkerMirroredStrategy on CPUs has one device per worker (it only multiplies GPU or
    TPU devices), so no TF program on this machine gives these cases. The per-worker dataset is
    built with TF's own pieces exactly as input_lib.py builds it for an input worker
    (distribute.compute_batch_size, batch_sizes_for_worker, Dataset.rebatch or
    _LegacyRebatchDataset, prefetch, input_ops.auto_shard_dataset, whose grappler rewrite is
    TF's), and only the distributed iterator's lockstep is replayed here from input_lib.py's
    logic: the elements of each worker's dataset go to its replicas in turn; a step exists while
    any replica of any worker has a value; replicas without one get TF's dummy (unknown
    dimensions and, for fully static shapes, dimension 0 set to 0). The spec is input_lib's:
    the worker's rebatched element_spec per replica, made dynamic (_rebatch_as_dynamic) when
    partial-batch handling is on (a dataset not known to be infinite). The generator also
    replays every "MultiWorkerMirroredStrategy" case and stops if the replay differs from TF
    there, so the replay is checked against TF wherever TF can run.
Files for text_line_dataset cases are tests/testdata/distribute/files/*.txt (written here).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile

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


def dist_spec_json(spec):
  """A DistributedDataset's element_spec as TF gives it: PerReplicaSpec leaves where TF wraps,
  plain TensorSpec leaves where it does not (one device, one worker)."""
  def leaf(s):
    if isinstance(s, tf_values.PerReplicaSpec):
      return {"per_replica": [spec_json(v) for v in s._value_specs]}  # pylint: disable=protected-access
    return spec_json(s)
  return nest_json(spec, leaf)


def step_json(x):
  """One step as TF gives it: {"per_replica": [...]} for PerReplica leaves, {"value": ...} for
  the plain element TF returns on one device."""
  leaves = tf.nest.flatten(x, expand_composites=False)
  wrapped = [isinstance(v, tf_values.PerReplica) for v in leaves]
  if not any(wrapped):
    return {"value": nest_json(x, tensor_json)}
  assert all(wrapped), "a step mixing PerReplica and plain leaves: %r" % (x,)
  replicas = len(leaves[0].values)
  out = []
  for r in range(replicas):
    pick = lambda v, r=r: v.values[r]  # noqa: E731
    out.append(nest_json(tf.nest.map_structure(pick, x, expand_composites=False), tensor_json))
  return {"per_replica": out}


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
    steps.append(step_json(x))
    if len(steps) >= c["max_steps"]:
      break
  return steps, dist_spec_json(dist.element_spec)


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
    steps.append({"per_replica": [nest_json(v, tensor_json) for v in mine]})
  return steps, dist_spec_json(dist_spec)


def free_port():
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def run_mwms_worker(case_name, index, ports, out_path):
  """One worker process of a MultiWorkerMirroredStrategy case (TF_CONFIG on loopback)."""
  c = next(c for c in CASES if c["name"] == case_name)
  os.environ["TF_CONFIG"] = json.dumps({
      "cluster": {"worker": ["127.0.0.1:%d" % p for p in ports]},
      "task": {"type": "worker", "index": index}})
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  assert strategy.num_replicas_in_sync == c["num_workers"], strategy.num_replicas_in_sync
  result = {}
  try:
    dist = strategy.experimental_distribute_dataset(make_dataset(c["expression"], c["policy"]))
    result["spec"] = dist_spec_json(dist.element_spec)
    steps = []
    for x in dist:
      steps.append(step_json(x))
      if len(steps) >= c["max_steps"]:
        break
    result["steps"] = steps
  except (tf.errors.OpError, ValueError) as e:
    result["error"] = getattr(e, "message", str(e))
  with open(out_path, "w") as f:
    json.dump(result, f)


def run_mwms(c):
  """Runs a case on a real MultiWorkerMirroredStrategy, one process per worker; returns what
  worker c["worker_index"] got. A worker that fails or hangs past the timeout is killed."""
  ports = [free_port() for _ in range(c["num_workers"])]
  with tempfile.TemporaryDirectory() as tmp:
    outs = [os.path.join(tmp, "w%d.json" % w) for w in range(c["num_workers"])]
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--mwms_worker", c["name"], str(w),
         ",".join(map(str, ports)), outs[w]]) for w in range(c["num_workers"])]
    for p in procs:
      try:
        p.wait(timeout=300)
      except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    own = outs[c["worker_index"]]
    if not os.path.exists(own):
      raise RuntimeError("%s: worker %d wrote nothing (exit %s)" % (
          c["name"], c["worker_index"], procs[c["worker_index"]].returncode))
    with open(own) as f:
      result = json.load(f)
  if "error" in result:
    raise ValueError(result["error"])
  return result["steps"], result["spec"]


def oracle_of(c):
  if c["num_workers"] == 1:
    return "MirroredStrategy"
  return "MultiWorkerMirroredStrategy" if c["devices"] == 1 else "input_lib replay"


def main():
  if len(sys.argv) > 1 and sys.argv[1] == "--mwms_worker":
    name, index, ports, out = sys.argv[2:6]
    run_mwms_worker(name, int(index), [int(p) for p in ports.split(",")], out)
    return
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
    entry["oracle"] = oracle_of(c)
    try:
      if entry["oracle"] == "MirroredStrategy":
        steps, spec = run_one_worker(c)
      elif entry["oracle"] == "MultiWorkerMirroredStrategy":
        steps, spec = run_mwms(c)
        replay = run_multi_worker(c)
        if replay != (steps, spec):
          sys.exit("%s: the input_lib replay differs from MultiWorkerMirroredStrategy:\n"
                   "TF:     %s\nreplay: %s" % (c["name"], (steps, spec), replay))
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
        f.write(json.dumps(dict({"step": i}, **s)) + "\n")
    with open(os.path.join(OUT, c["name"] + ".spec.json"), "w") as f:
      f.write(json.dumps(spec) + "\n")
    index.append(entry)
    print("%-28s %d steps" % (c["name"], len(steps)))
  if not only:
    with open(os.path.join(OUT, "index.json"), "w") as f:
      json.dump({"generator": "tools/golden/gen_distribute_goldens.py",
                 "tensorflow": tf.__version__,
                 "oracles": {
                     "MirroredStrategy": "TF's MirroredStrategy, values and spec as TF returns "
                                         "them",
                     "MultiWorkerMirroredStrategy": "TF's MultiWorkerMirroredStrategy, one "
                                                    "process per worker on loopback (TF_CONFIG)",
                     "input_lib replay": "TF's per-worker datasets (input_lib's construction) "
                                         "with the distributed iterator's lockstep replayed in "
                                         "the generator: TF's MultiWorkerMirroredStrategy has "
                                         "one CPU device per worker, so no TF program here "
                                         "runs several replicas per worker"},
                 "cases": index}, f, indent=1)
      f.write("\n")


if __name__ == "__main__":
  main()
