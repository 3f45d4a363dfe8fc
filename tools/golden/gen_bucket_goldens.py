#!/usr/bin/env python3
"""Goldens for bucket_by_sequence_length: what tf.data (tensorflow-cpu 2.15.1) yields.

Writes tests/testdata/text/bucket_goldens.json. Each case's input is a list of int64 vectors
(the test writes them as JSON Lines {"x": [...]} and reads them with jsonl_dataset); TF gets the
same vectors from a generator as {'x': int64 [None]}. Every case records the element_spec shapes
(None as -1) and the batches ('x' values, nested lists), or a piece of TF's error message.

  /tmp/tfvenv/bin/python tools/golden/gen_bucket_goldens.py
"""
import json
import os
import random

import numpy as np
import tensorflow as tf

SEED = 31
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "testdata", "text",
                   "bucket_goldens.json")


def vectors(rng, n, max_len):
    return [[rng.randrange(1, 1000) for _ in range(rng.randrange(0, max_len + 1))]
            for _ in range(n)]


def run(data, kwargs):
    def gen():
        for v in data:
            yield {"x": np.array(v, dtype=np.int64)}

    ds = tf.data.Dataset.from_generator(
        gen, output_signature={"x": tf.TensorSpec([None], tf.int64)})
    case = {"data": data, "args": kwargs}
    try:
        tf_kwargs = dict(kwargs)
        if "padded_shapes" in tf_kwargs:
            tf_kwargs["padded_shapes"] = {"x": tf_kwargs["padded_shapes"]}
        if "padding_values" in tf_kwargs:
            tf_kwargs["padding_values"] = {"x": tf.constant(tf_kwargs["padding_values"], tf.int64)}
        out = ds.bucket_by_sequence_length(lambda e: tf.shape(e["x"])[0], **tf_kwargs)
        case["spec_shape"] = [-1 if d is None else d for d in out.element_spec["x"].shape.as_list()]
        case["batches"] = [b["x"].numpy().tolist() for b in out]
    except Exception as e:  # noqa: BLE001 - the message is the golden
        case["error"] = str(e).splitlines()[0][:200]
    return case


def main():
    rng = random.Random(SEED)
    print(f"gen_bucket_goldens: seed {SEED}")
    cases = {}
    cases["basic"] = run(vectors(rng, 23, 8),
                         {"bucket_boundaries": [3, 5], "bucket_batch_sizes": [2, 2, 3]})
    cases["one_boundary_big_batches"] = run(
        vectors(rng, 40, 12), {"bucket_boundaries": [6], "bucket_batch_sizes": [4, 5]})
    cases["drop_remainder"] = run(vectors(rng, 23, 8),
                                  {"bucket_boundaries": [3, 5], "bucket_batch_sizes": [2, 2, 3],
                                   "drop_remainder": True})
    cases["pad_to_bucket_boundary"] = run(
        vectors(rng, 25, 9), {"bucket_boundaries": [4, 7, 10], "bucket_batch_sizes": [3, 2, 2, 1],
                              "pad_to_bucket_boundary": True})
    cases["padded_shapes_and_values"] = run(
        vectors(rng, 17, 6), {"bucket_boundaries": [2, 4], "bucket_batch_sizes": [3, 3, 3],
                              "padded_shapes": [8], "padding_values": -1})
    cases["pad_to_boundary_too_long"] = run(
        [[1, 2], [1, 2, 3, 4, 5, 6]], {"bucket_boundaries": [4], "bucket_batch_sizes": [1, 1],
                                       "pad_to_bucket_boundary": True})
    cases["wrong_number_of_batch_sizes"] = run(
        [[1]], {"bucket_boundaries": [4, 8], "bucket_batch_sizes": [1, 1]})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"tensorflow": tf.__version__, "seed": SEED, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
