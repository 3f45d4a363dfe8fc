#!/usr/bin/env python3
"""TensorFlow reference for bench/image_bench.cc: the same JPEGs (images.tfrecord, written by
image_bench) through the same pipeline in tf.data on one core:

  TFRecordDataset -> decode_jpeg(channels=3) -> random_crop(224x224x3) -> random_flip_left_right
  -> (x - mean) / std -> batch(256)

with tf.data's private thread pool and TF's intra/inter-op pools limited to one thread and every
map sequential. Needs tensorflow-cpu (a throwaway venv; not a Sluice dependency).

  python bench/tf_image_reference.py [/tmp/sluice-image-bench] [reps]
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/sluice-image-bench"
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
mean = tf.constant([123.7, 116.3, 103.5])
std = tf.constant([58.4, 57.1, 57.4])


def prepare(jpeg):
    img = tf.io.decode_jpeg(jpeg, channels=3)
    img = tf.image.random_crop(img, [224, 224, 3], seed=1)
    img = tf.image.random_flip_left_right(img, seed=2)
    return (tf.cast(img, tf.float32) - mean) / std


options = tf.data.Options()
options.threading.private_threadpool_size = 1
options.autotune.enabled = False
ds = (tf.data.TFRecordDataset(os.path.join(folder, "images.tfrecord"))
      .map(prepare).batch(256).with_options(options))
rates, cpu_rates = [], []
for r in range(reps):
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in ds:
        n += int(batch.shape[0])
    rates.append(n / (time.perf_counter() - t0))
    cpu_rates.append(n / (time.process_time() - c0))
    print("rep %d: %d images, %.0f images/s, %.0f images per CPU-second"
          % (r, n, rates[-1], cpu_rates[-1]))
rates.sort()
cpu_rates.sort()
print("tensorflow %s median: %.0f images/s on one core, %.0f images per CPU-second"
      % (tf.__version__, rates[len(rates) // 2], cpu_rates[len(cpu_rates) // 2]))
