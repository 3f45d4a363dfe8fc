"""TF's Inception preprocessing from Python (issue 27): sample_distorted_bounding_box on JPEG
bytes gives (bytes, crop_window), decode_and_crop_jpeg() decodes that window; the same seed gives
the same boxes, the spec and the expression round trip, and bad arguments name the op."""

import os

import pytest

import sluice

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "..", "..", "tests", "testdata", "images")

BOXES = ("sample_distorted_bounding_box([[[0.1, 0.1, 0.9, 0.8]]], seed=9, "
         "area_range=(0.08, 1.0), max_attempts=10)")


def _jpegs():
    out = []
    for name in ["photo.jpg", "rgb.jpg", "progressive.jpg", "rgb444.jpg"] * 2:
        with open(os.path.join(IMAGES, name), "rb") as f:
            out.append(f.read())
    return out


def _elements(ds):
    strategy = sluice.MirroredStrategy(["CPU:0"])
    return [x for x in strategy.experimental_distribute_dataset(ds)]


def test_inception_preprocessing_decodes_each_box():
    src = sluice.data.Dataset.from_tensor_slices({"jpg": _jpegs()})
    boxes = src.map(BOXES, key="jpg")
    images = boxes.map("decode_and_crop_jpeg(channels=3)", key="jpg")
    spec = images.element_spec["jpg"]
    assert spec.shape == (None, None, 3) and spec.dtype == "uint8"
    assert sluice.data.parse(images.to_expression()).fingerprint() == images.fingerprint()

    windows = [e["jpg"][1].numpy().tolist() for e in _elements(boxes)]
    again = [e["jpg"][1].numpy().tolist() for e in _elements(boxes)]
    assert windows == again  # seeded: the same boxes on every run
    assert len({tuple(w) for w in windows}) > 4
    decoded = [e["jpg"].numpy() for e in _elements(images)]
    for window, image in zip(windows, decoded):
        assert list(image.shape) == [window[2], window[3], 3]


@pytest.mark.parametrize("fn,message", [
    ("sample_distorted_bounding_box([[[0.1, 0.2, 1.5, 0.3]]])", "must be in [0, 1]"),
    ("sample_distorted_bounding_box(area_range=(0.5, 0.1))", "area_range"),
])
def test_bad_boxes_name_the_op(fn, message):
    with pytest.raises(sluice.errors.InvalidArgumentError) as e:
        sluice.data.Dataset.from_tensors({"jpg": b"x"}).map(fn, key="jpg").element_spec
    assert "sample_distorted_bounding_box" in str(e.value) and message in str(e.value)
