#!/usr/bin/env python3
"""Generates tests/testdata/tfrecord/: record files written by TensorFlow and what TensorFlow reads
from them, for the TFRecord / fixed-length readers, the writer's byte-identity tests and
parse_example.

Developer tooling only: the build and the tests never run TensorFlow. Run from the repository
root with the TF venv (tensorflow-cpu 2.15):

  /tmp/tfvenv/bin/python tools/golden/gen_tfrecord_fixtures.py

Writes:
  plain.tfrecord, gzip.tfrecord.gz, zlib.tfrecord.zlib   BASIC_RECORDS by tf.io.TFRecordWriter
                                                          with compression '', GZIP, ZLIB
  big.tfrecord.gz, big.tfrecord.zlib                      big_records() (records larger than
                                                          TF's 256 KiB zlib buffers)
  empty.tfrecord, empty.tfrecord.gz                       writers closed with no record
  fixed.bin, fixed_partial.bin, fixed.bin.gz               fixed-length record files
  inter_[abcd].tfrecord                                   small files for num_parallel_reads order
  examples.tfrecord                                       EXAMPLES as tf.train.Example
  golden.json  records as hex, what tf.data reads from every file, and parse_example results
"""
import gzip
import json
import os
import zlib

import numpy as np
import tensorflow as tf

OUT = "tests/testdata/tfrecord"

BASIC_RECORDS = [b"", b"a", b"hello world", bytes(range(256)) * 4, b"\x00" * 17]


def big_records():
    # Byte j of record i: (i * 31 + j * 7 + (j >> 10)) & 0xff. Reproduced in the C++ tests.
    out = []
    for i, n in enumerate([70000, 300000, 5]):
        j = np.arange(n, dtype=np.int64)
        out.append((((i * 31) + j * 7 + (j >> 10)) & 0xFF).astype(np.uint8).tobytes())
    return out


def write(path, records, compression):
    with tf.io.TFRecordWriter(os.path.join(OUT, path), options=compression) as w:
        for r in records:
            w.write(r)


def read(path, compression=""):
    ds = tf.data.TFRecordDataset(os.path.join(OUT, path), compression_type=compression)
    return [r.hex() for r in ds.as_numpy_iterator()]


def read_fixed(path, record_bytes, header_bytes, footer_bytes, compression=""):
    ds = tf.data.FixedLengthRecordDataset(os.path.join(OUT, path), record_bytes,
                                          header_bytes=header_bytes, footer_bytes=footer_bytes,
                                          compression_type=compression)
    try:
        return {"records": [r.hex() for r in ds.as_numpy_iterator()]}
    except Exception as e:  # noqa: BLE001 - the golden records TF's error
        return {"error": type(e).__name__, "message": str(e).splitlines()[0]}


def bytes_f(v):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))


def int_f(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=v))


def float_f(v):
    return tf.train.Feature(float_list=tf.train.FloatList(value=v))


EXAMPLES = [
    {"image": bytes_f([b"\x00\x01\x02"]), "label": int_f([7]), "scores": float_f([0.5, 1.5]),
     "tags": bytes_f([b"a", b"b"]), "ids": int_f([1, 2, 3]), "m": float_f([1, 2, 3, 4, 5, 6])},
    {"image": bytes_f([b"xyz"]), "scores": float_f([2.0, -1.0]), "tags": bytes_f([]),
     "ids": int_f([4]), "m": float_f([0, 0, 0, 0, 0, 1])},
    {"image": bytes_f([b""]), "label": int_f([-3]), "scores": float_f([0.25, 0.0]),
     "tags": bytes_f([b"c"]), "ids": int_f([]), "m": float_f([6, 5, 4, 3, 2, 1])},
]

SPEC = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "scores": tf.io.FixedLenFeature([2], tf.float32),
    "m": tf.io.FixedLenFeature([2, 3], tf.float32),
    "tags": tf.io.VarLenFeature(tf.string),
    "ids": tf.io.VarLenFeature(tf.int64),
}


def tensor_json(t):
    if isinstance(t, tf.SparseTensor):
        t = tf.sparse.to_dense(t)
    a = np.asarray(t.numpy(), dtype=object) if t.dtype == tf.string else t.numpy()
    if a.dtype.kind in "OS":  # strings as hex
        values = np.array([b.hex() for b in a.reshape(-1)], dtype=object).reshape(a.shape).tolist()
    else:
        values = a.tolist()
    return {"dtype": t.dtype.name, "shape": list(a.shape), "values": values}


def parse_results(serialized):
    batch = tf.io.parse_example(tf.constant(serialized), SPEC)
    single = [tf.io.parse_single_example(s, SPEC) for s in serialized]
    ds = tf.data.TFRecordDataset(os.path.join(OUT, "examples.tfrecord")).batch(3).map(
        lambda x: tf.io.parse_example(x, SPEC))
    return {
        "batch_keys": list(batch.keys()),
        "batch": {k: tensor_json(v) for k, v in batch.items()},
        "single": [{k: tensor_json(v) for k, v in s.items()} for s in single],
        "dataset_element_spec_keys": list(ds.element_spec.keys()),
    }


def errors(serialized):
    out = {}
    cases = {
        "missing_required": {"label": tf.io.FixedLenFeature([], tf.int64)},
        "wrong_type": {"label": tf.io.FixedLenFeature([], tf.float32)},
        "wrong_count": {"scores": tf.io.FixedLenFeature([3], tf.float32)},
    }
    for name, spec in cases.items():
        try:
            tf.io.parse_example(tf.constant(serialized), spec)
            out[name] = None
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": type(e).__name__, "message": str(e).splitlines()[0]}
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    write("plain.tfrecord", BASIC_RECORDS, "")
    write("gzip.tfrecord.gz", BASIC_RECORDS, "GZIP")
    write("zlib.tfrecord.zlib", BASIC_RECORDS, "ZLIB")
    write("big.tfrecord.gz", big_records(), "GZIP")
    write("big.tfrecord.zlib", big_records(), "ZLIB")
    write("empty.tfrecord", [], "")
    write("empty.tfrecord.gz", [], "GZIP")

    fixed_records = [bytes([i, i + 1, i + 2, i + 3]) for i in range(0, 20, 4)]
    with open(os.path.join(OUT, "fixed.bin"), "wb") as f:
        f.write(b"HDR" + b"".join(fixed_records) + b"FT")
    with open(os.path.join(OUT, "fixed_partial.bin"), "wb") as f:
        f.write(b"HDR" + b"".join(fixed_records[:3]) + b"\xaa\xbb" + b"FT")
    with open(os.path.join(OUT, "fixed.bin.gz"), "wb") as f:
        f.write(gzip.compress(b"HDR" + b"".join(fixed_records) + b"FT", mtime=0))

    inter = {"inter_a.tfrecord": [b"a0", b"a1", b"a2"], "inter_b.tfrecord": [b"b0"],
             "inter_c.tfrecord": [b"c0", b"c1"], "inter_d.tfrecord": [b"d0", b"d1", b"d2", b"d3"]}
    for name, records in inter.items():
        write(name, records, "")
    inter_files = [os.path.join(OUT, n) for n in sorted(inter)]
    interleave = {}
    for n in [2, 3]:
        ds = tf.data.TFRecordDataset(inter_files, num_parallel_reads=n)
        interleave[str(n)] = [r.decode() for r in ds.as_numpy_iterator()]

    serialized = [tf.train.Example(features=tf.train.Features(feature=e)).SerializeToString()
                  for e in EXAMPLES]
    write("examples.tfrecord", serialized, "")

    golden = {
        "basic_records": [r.hex() for r in BASIC_RECORDS],
        "read": {
            "plain.tfrecord": read("plain.tfrecord"),
            "gzip.tfrecord.gz": read("gzip.tfrecord.gz", "GZIP"),
            "zlib.tfrecord.zlib": read("zlib.tfrecord.zlib", "ZLIB"),
            "empty.tfrecord": read("empty.tfrecord"),
            "empty.tfrecord.gz": read("empty.tfrecord.gz", "GZIP"),
        },
        "big_sizes": [len(r) for r in big_records()],
        "big_read_ok": read("big.tfrecord.gz", "GZIP") == [r.hex() for r in big_records()],
        "fixed": {
            "fixed.bin": read_fixed("fixed.bin", 4, 3, 2),
            "fixed_partial.bin": read_fixed("fixed_partial.bin", 4, 3, 2),
            "fixed_partial_no_footer": read_fixed("fixed_partial.bin", 4, 3, 0),
            "fixed.bin.gz": read_fixed("fixed.bin.gz", 4, 3, 2, "GZIP"),
        },
        "interleave_files": sorted(inter),
        "interleave": interleave,
        "examples_hex": [s.hex() for s in serialized],
        "parse": parse_results(serialized),
        "parse_errors": errors(serialized),
    }
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
