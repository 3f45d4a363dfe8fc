#!/usr/bin/env python3
"""The tf.data reference for bench/text_bench.cc: the same JSON Lines corpus ->
tf_text.SentencepieceTokenizer -> seqio-style packing to rows of --length, timed in CPU-seconds
of this process (user + system), and the ids of the first --dump_count texts written like
text_bench --dump_ids for an exact comparison.

Packing is tf.data's own: the token vectors are concatenated and cut into rows
(`unbatch().batch(length)` over the ids, plus segment ids and positions per row), the cheapest
packing tf.data expresses without a custom op; seqio's trim_and_pack uses a similar custom op.

  /tmp/text-venv/bin/python bench/tf_text_reference.py --jsonl=F --model=M [--length=2048]
"""
import argparse
import json
import resource
import time

import tensorflow as tf
import tensorflow_text as tf_text


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--jsonl", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dump_ids", default="")
    p.add_argument("--dump_count", type=int, default=1000)
    a = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    with open(a.model, "rb") as f:
        tokenizer = tf_text.SentencepieceTokenizer(model=f.read(), out_type=tf.int32)

    def texts():
        # Parsing JSON is done in Python here (tf.data has no JSON Lines reader), before the
        # clock starts: the figure below is tokenize + pack only, favouring the reference.
        with open(a.jsonl) as f:
            return [json.loads(line)["text"] for line in f]

    corpus = texts()
    text_bytes = sum(len(t.encode()) for t in corpus)
    if a.dump_ids:
        ids = tokenizer.tokenize(tf.constant(corpus[: a.dump_count]))
        with open(a.dump_ids, "w") as out:
            for row in ids.to_list():
                out.write(" ".join(str(x) for x in row) + "\n")

    ds = tf.data.Dataset.from_tensor_slices(corpus)
    ds = ds.map(tokenizer.tokenize, num_parallel_calls=a.threads)
    # Segment ids: the example's index; positions: 0.. within it; then cut into rows.
    ds = ds.enumerate().map(lambda i, t: (t, tf.fill(tf.shape(t), tf.cast(i, tf.int32)),
                                          tf.range(tf.shape(t)[0], dtype=tf.int32)))
    ds = ds.unbatch().batch(a.length)
    cpu0, wall0 = cpu_seconds(), time.monotonic()
    rows = 0
    for _ in ds:
        rows += 1
    cpu, wall = cpu_seconds() - cpu0, time.monotonic() - wall0
    mb = text_bytes / 1e6
    print("tf.data + tf_text: %d texts, %.1f MB of text, %d rows of %d, %.2f CPU-s, %.2f s: "
          "%.1f MB/CPU-s, %.1f MB/s" % (len(corpus), mb, rows, a.length, cpu, wall, mb / cpu,
                                       mb / wall))


if __name__ == "__main__":
    main()
