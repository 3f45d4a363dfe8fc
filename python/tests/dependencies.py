"""What a Python test needs that it may lack, and what a missing one means.

Outside CI a test whose dependency is missing skips, saying which one and how to get it. Under
``CI=true`` a dependency that scripts/test.sh installs or builds (Debian's python3-torch, the
sluice-coordinator and sluice-worker binaries) fails the test instead: CI that cannot install it
is broken, and a skip would look like a pass. Dependencies that scripts/test.sh cannot install
(JAX and TensorFlow are not packaged in Debian 12) skip everywhere; call pytest.importorskip
for those.
"""

import importlib
import os

import pytest

import sluice_cluster


def in_ci():
    """True when the CI environment variable says so (CI=true, as GitHub Actions, GitLab CI
    and most runners set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(reason):
    """Skips the calling test with `reason`, or fails it under CI=true (scripts/test.sh provides
    what it lacks). Usable at module level, where it skips or fails the whole file."""
    if in_ci():
        pytest.fail("%s; under CI=true a dependency scripts/test.sh provides is required" % reason,
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_installable(module, package):
    """The module `module`, which scripts/test.sh installs (Debian package `package`); see
    missing() for what happens without it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing("%s is not importable (%s; apt-get install %s, or scripts/test.sh)"
                % (module, e, package))


def require_binaries():
    """Skips (or, under CI=true, fails) unless sluice-coordinator and sluice-worker are built."""
    for name in ("sluice-coordinator", "sluice-worker"):
        if not os.path.exists(os.path.join(sluice_cluster.BUILD_DIR, "bin", name)):
            missing("%s is not built in %s (cmake --build build --target sluice-coordinator "
                    "sluice-worker, or scripts/test.sh)" % (name, sluice_cluster.BUILD_DIR))
