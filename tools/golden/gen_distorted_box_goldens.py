#!/usr/bin/env python3
"""Writes TF's statistics of tf.image.sample_distorted_bounding_box for
tests/core/distorted_bounding_box_test.cc (tests/testdata/images/distorted_boxes_golden.json).

TF's random stream (Philox) cannot be reproduced, so the test compares what the boxes look like
over many draws: for each case (image size, object boxes, options), the mean height, width and
area shares of the box and how often the whole image comes back (the fallback after
max_attempts), over N draws.

Developer tooling only: needs tensorflow-cpu in a throwaway venv (see gen_image_goldens.py):
  /tmp/tfvenv/bin/python tools/golden/gen_distorted_box_goldens.py     (from the repository root)
"""
import json, sys
import numpy as np
import tensorflow as tf
tf.random.set_seed(1)
out = []
cases = [
  dict(size=[375, 500, 3], boxes=[], area=(0.08, 1.0), aspect=(0.75, 1.33), min_cov=0.1, attempts=10),
  dict(size=[375, 500, 3], boxes=[], area=(0.05, 1.0), aspect=(0.75, 1.33), min_cov=0.1, attempts=100),
  dict(size=[1500, 2000, 3], boxes=[[0.1, 0.2, 0.5, 0.6]], area=(0.05, 1.0), aspect=(0.75, 1.33), min_cov=0.5, attempts=100),
  dict(size=[40, 60, 3], boxes=[[0.0, 0.0, 0.3, 0.3], [0.5, 0.5, 1.0, 1.0]], area=(0.1, 0.6), aspect=(0.5, 2.0), min_cov=0.7, attempts=20),
]
N = 4000
for c in cases:
  H, W = c["size"][0], c["size"][1]
  boxes = tf.constant(np.array(c["boxes"], np.float32).reshape(1, -1, 4))
  hs, ws, ys, xs, full = [], [], [], [], 0
  for i in range(N):
    b, s, _ = tf.image.sample_distorted_bounding_box(
        tf.constant(c["size"], tf.int32), boxes, min_object_covered=c["min_cov"],
        aspect_ratio_range=c["aspect"], area_range=c["area"], max_attempts=c["attempts"],
        use_image_if_no_bounding_boxes=True)
    b = b.numpy(); s = s.numpy()
    hs.append(s[0]); ws.append(s[1]); ys.append(b[0]); xs.append(b[1])
    full += int(s[0] == H and s[1] == W)
  hs, ws = np.array(hs, float), np.array(ws, float)
  out.append(dict(case=c, n=N, mean_height_share=float(np.mean(hs / H)), mean_width_share=float(np.mean(ws / W)),
                  mean_area_share=float(np.mean(hs * ws / (H * W))), whole_image_share=full / N,
                  sd_area_share=float(np.std(hs * ws / (H * W))),
                  max_y_end=int(np.max(np.array(ys) + hs)), max_x_end=int(np.max(np.array(xs) + ws))))
  print(out[-1], file=sys.stderr)
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "tests/testdata/images/distorted_boxes_golden.json", "w"), indent=1)
