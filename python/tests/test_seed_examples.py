"""The seed's five programs in Python (examples/python/seed_*.py) print byte for byte what the
seed shows: the same goldens the C++ examples are held to (tests/testdata/seed/)."""

import os
import subprocess
import sys

import pytest

from conftest import SOURCE_DIR

SEEDS = ["seed_for_loop", "seed_explicit_iterator", "seed_input_signature",
         "seed_element_spec", "seed_iter"]


@pytest.mark.parametrize("name", SEEDS)
def test_prints_the_seed_output_exactly(name):
    with open(os.path.join(SOURCE_DIR, "tests", "testdata", "seed", name + ".txt"), "rb") as f:
        golden = f.read()
    r = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "examples", "python", name + ".py")],
                       capture_output=True, timeout=300, env=os.environ.copy())
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == golden, r.stderr.decode()
