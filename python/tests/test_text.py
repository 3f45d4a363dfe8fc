"""Text through the Python builders: jsonl_dataset -> map(tokenize) -> pack, and
bucket_by_sequence_length, run by a one-replica strategy."""

import json
import shutil
import subprocess

import pytest

import sluice


def _steps(ds):
    strategy = sluice.MirroredStrategy(["GPU:0"])
    return [strategy.experimental_local_results(step)[0]
            for step in strategy.experimental_distribute_dataset(ds)]


def test_jsonl_tokenize_pack(tmp_path):
    if shutil.which("spm_train") is None:
        pytest.skip("spm_train (Debian package sentencepiece) is not installed")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join("hello world number %d of the corpus\n" % i for i in range(500)))
    subprocess.run(["spm_train", "--input=%s" % corpus, "--model_prefix=%s" % (tmp_path / "m"),
                    "--vocab_size=60", "--hard_vocab_limit=false", "--num_threads=1"], check=True, capture_output=True)
    lines = tmp_path / "docs.jsonl"
    lines.write_text("".join(json.dumps({"text": "hello world %d" % i, "id": i}) + "\n"
                             for i in range(20)))
    ds = (sluice.data.Dataset.jsonl_dataset(str(lines), keys={"text": "string", "id": "int64"})
          .map("tokenize(%r, add_eos=True)" % str(tmp_path / "m.model"), key="text")
          .pack(16, keys=["text"])
          .batch(2))
    spec = ds.element_spec
    assert sorted(spec) == ["text", "text_positions", "text_segment_ids"]
    rows = [r for step in _steps(ds) for r in step["text_segment_ids"].numpy().tolist()]
    segments = sum(max(r) for r in rows)
    assert segments == 20  # every document once


def test_bucket_by_sequence_length(tmp_path):
    lines = tmp_path / "v.jsonl"
    lines.write_text("".join(json.dumps({"x": list(range(n))}) + "\n" for n in [1, 5, 2, 6, 1]))
    ds = (sluice.data.Dataset.jsonl_dataset(str(lines), keys={"x": ["int64"]})
          .bucket_by_sequence_length("x", [3], [2, 2]))
    batches = [b["x"].numpy().tolist() for b in _steps(ds)]
    assert batches == [[[0, 0], [0, 1]], [[0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 4, 5]], [[0]]]
