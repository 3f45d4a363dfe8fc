#!/usr/bin/env python3
"""Writes the image fixtures and TF's results for tests/core/image_ops_test.cc.

Developer tooling only: needs tensorflow-cpu and pillow in a throwaway venv, e.g.
  python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu pillow
  /tmp/tfvenv/bin/python tools/golden/gen_image_goldens.py      (from the repository root)

Images (tests/testdata/images/): synthetic patterns, encoded by TF (JPEG) and PIL (PNG):
  rgb.jpg (53x37, 4:2:0, q90), rgb444.jpg (4:4:4, q95), gray.jpg, rgb.png, rgba.png, gray.png,
  palette.png. golden.json holds, from TF 2 (tf.io.decode_image / tf.image.resize / central_crop):
  decode: shape and sha256 of the uint8 pixels for channels 0, 1, 3 (4 for PNG with alpha);
  resize: the float32 values (rounded to 4 decimals) of tf.image.resize(img, size) (bilinear, half-pixel centers, no
  antialias) for down- and upsampling; central_crop: shape and sha256.
  photo.jpg (320x240, noisy smooth shapes) and progressive.jpg (the same, progressive);
  decode_and_crop: shape and sha256 of tf.image.decode_and_crop_jpeg for windows;
  jpeg_shape: tf.io.extract_jpeg_shape.
"""
import hashlib
import io
import json
import os

import numpy as np
import tensorflow as tf
from PIL import Image

OUT = "tests/testdata/images"


def pattern(h, w, c):
    y, x, k = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    return ((x * 7 + y * 13 + k * 61 + (x * y) % 17 * 5) % 256).astype(np.uint8)


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main():
    os.makedirs(OUT, exist_ok=True)
    rgb = pattern(37, 53, 3)
    write("rgb.jpg", tf.io.encode_jpeg(rgb, quality=90).numpy())
    write("rgb444.jpg", tf.io.encode_jpeg(rgb, quality=95, chroma_downsampling=False).numpy())
    write("gray.jpg", tf.io.encode_jpeg(pattern(20, 16, 1), quality=90).numpy())
    for name, img in [("rgb.png", Image.fromarray(pattern(20, 16, 3), "RGB")),
                      ("rgba.png", Image.fromarray(pattern(20, 16, 4), "RGBA")),
                      ("gray.png", Image.fromarray(pattern(20, 16, 1)[:, :, 0], "L")),
                      ("palette.png", Image.fromarray(pattern(20, 16, 3), "RGB").convert(
                          "P", palette=Image.ADAPTIVE, colors=16))]:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        write(name, buf.getvalue())

    golden = {"decode": [], "resize": [], "central_crop": []}
    files = ["rgb.jpg", "rgb444.jpg", "gray.jpg", "rgb.png", "rgba.png", "gray.png", "palette.png"]
    for name in files:
        data = open(os.path.join(OUT, name), "rb").read()
        channels = [0, 3] + ([1] if name.endswith(".jpg") else []) + (
            [4] if name in ("rgba.png", "rgb.png", "palette.png") else [])
        if name == "gray.png":
            channels.append(1)
        for c in channels:
            img = tf.io.decode_image(data, channels=c, expand_animations=False).numpy()
            golden["decode"].append({"file": name, "channels": c, "shape": list(img.shape),
                                     "sha256": sha(img)})
    for name, size in [("rgb.jpg", [17, 29]), ("rgb.png", [30, 24]), ("gray.jpg", [7, 5]),
                       ("rgba.png", [20, 33])]:
        img = tf.io.decode_image(open(os.path.join(OUT, name), "rb").read(),
                                 expand_animations=False)
        out = tf.image.resize(img, size).numpy()
        golden["resize"].append({"file": name, "size": size, "shape": list(out.shape),
                                 "values": [round(float(v), 4) for v in out.reshape(-1)]})
    for name, fraction in [("rgb.jpg", 0.5), ("rgb.jpg", 0.875), ("rgba.png", 0.3)]:
        img = tf.io.decode_image(open(os.path.join(OUT, name), "rb").read(),
                                 expand_animations=False)
        out = tf.image.central_crop(img, fraction).numpy()
        golden["central_crop"].append({"file": name, "fraction": fraction,
                                       "shape": list(out.shape), "sha256": sha(out)})
    # Window decode (issue 27): a larger photo-like JPEG (smooth shapes and noise), a progressive
    # one, TF's decode_and_crop_jpeg pixels for windows and extract_jpeg_shape.
    rng = np.random.default_rng(27)
    yy, xx = np.meshgrid(np.arange(240), np.arange(320), indexing="ij")
    photo = np.stack([128 + 100 * np.sin(xx / 23.0 + k) * np.cos(yy / 31.0 - k) for k in range(3)],
                     axis=-1) + rng.normal(0, 12, (240, 320, 3))
    photo = np.clip(photo, 0, 255).astype(np.uint8)
    write("photo.jpg", tf.io.encode_jpeg(photo, quality=90).numpy())
    write("progressive.jpg", tf.io.encode_jpeg(photo, quality=85, progressive=True).numpy())
    golden["decode_and_crop"] = []
    for name, window, c in [("rgb.jpg", [3, 5, 20, 30], 0), ("rgb.jpg", [0, 17, 37, 9], 3),
                            ("gray.jpg", [2, 3, 10, 7], 0), ("rgb444.jpg", [11, 21, 9, 31], 0),
                            ("photo.jpg", [37, 61, 150, 201], 0), ("photo.jpg", [0, 0, 240, 320], 1),
                            ("progressive.jpg", [100, 7, 77, 300], 3)]:
        data = open(os.path.join(OUT, name), "rb").read()
        out = tf.image.decode_and_crop_jpeg(data, window, channels=c).numpy()
        golden["decode_and_crop"].append({"file": name, "window": window, "channels": c,
                                          "shape": list(out.shape), "sha256": sha(out)})
    golden["jpeg_shape"] = []
    for name in ["rgb.jpg", "gray.jpg", "photo.jpg", "progressive.jpg"]:
        data = open(os.path.join(OUT, name), "rb").read()
        golden["jpeg_shape"].append({"file": name,
                                     "shape": tf.io.extract_jpeg_shape(data).numpy().tolist()})
    golden["tensorflow"] = tf.__version__
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f)
        f.write("\n")


if __name__ == "__main__":
    main()
