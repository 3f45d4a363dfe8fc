#!/usr/bin/env python3
"""TensorFlow reference for bench/image_bench.cc: the same JPEGs (images.tfrecord, written by
image_bench) through the same pipelines in tf.data on one core:

  crop:      TFRecordDataset -> decode_jpeg(channels=3) -> random_crop(224x224x3)
             -> random_flip_left_right -> (x - mean) / std -> batch(256)
  rrc_best:  RandomResizedCrop(224) in TF's best form (Inception preprocessing):
             extract_jpeg_shape -> sample_distorted_bounding_box(area_range=(0.08, 1),
             aspect_ratio_range=(3/4, 4/3), max_attempts=10) -> decode_and_crop_jpeg(window)
             -> resize(224x224, bilinear) -> random_flip_left_right -> (x - mean) / std
             -> batch(256)
  rrc_full:  the same box, but decode_jpeg of the whole image, then crop and resize

with tf.data's private thread pool and TF's intra/inter-op pools limited to one thread and every
map sequential. Needs tensorflow-cpu (a throwaway venv; not a Sluice dependency).

  python bench/tf_image_reference.py [/tmp/sluice-image-bench] [reps] [crop|rrc_best|rrc_full|all]

CPU time is time.process_time() (getrusage: user + system of the process).
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
which = sys.argv[3] if len(sys.argv) > 3 else "crop"
mean = tf.constant([123.7, 116.3, 103.5])
std = tf.constant([58.4, 57.1, 57.4])


def prepare_crop(jpeg):
    img = tf.io.decode_jpeg(jpeg, channels=3)
    img = tf.image.random_crop(img, [224, 224, 3], seed=1)
    img = tf.image.random_flip_left_right(img, seed=2)
    return (tf.cast(img, tf.float32) - mean) / std


def box(jpeg):
    shape = tf.io.extract_jpeg_shape(jpeg)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape, bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), min_object_covered=0.0,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
        use_image_if_no_bounding_boxes=True, seed=1)
    return begin, size


def finish(img):
    img = tf.image.resize(img, [224, 224])
    img = tf.image.random_flip_left_right(img, seed=2)
    return (img - mean) / std


def prepare_rrc_best(jpeg):
    begin, size = box(jpeg)
    window = tf.stack([begin[0], begin[1], size[0], size[1]])
    return finish(tf.image.decode_and_crop_jpeg(jpeg, window, channels=3))


def prepare_rrc_full(jpeg):
    begin, size = box(jpeg)
    img = tf.io.decode_jpeg(jpeg, channels=3)
    return finish(tf.slice(img, begin, size))


def run(name, prepare):
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
        print("%s rep %d: %d images, %.0f images/s, %.0f images per CPU-second"
              % (name, r, n, rates[-1], cpu_rates[-1]))
    rates.sort()
    cpu_rates.sort()
    print("tensorflow %s %s median: %.0f images/s on one core, %.0f images per CPU-second"
          % (tf.__version__, name, rates[len(rates) // 2], cpu_rates[len(cpu_rates) // 2]))


for name, prepare in [("crop", prepare_crop), ("rrc_best", prepare_rrc_best),
                      ("rrc_full", prepare_rrc_full)]:
    if which in (name, "all"):
        run(name, prepare)
