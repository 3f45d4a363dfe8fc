"""Shared fixtures: paths, and a real coordinator + workers on loopback."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import sluice_cluster  # noqa: E402


@pytest.fixture
def cluster():
    if not os.path.exists(os.path.join(sluice_cluster.BUILD_DIR, "bin", "sluice-coordinator")):
        pytest.skip("sluice-coordinator is not built (cmake --build build --target "
                    "sluice-coordinator sluice-worker)")
    c = sluice_cluster.Cluster(num_workers=2)
    yield c
    c.stop()
