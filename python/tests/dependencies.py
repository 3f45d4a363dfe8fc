"""What a Python test needs that it may lack, and what a missing one means.

Outside CI a test whose dependency is missing skips, saying which one and how to get it. Under
``CI=true`` a dependency that scripts/test.sh installs or builds (Debian's python3-torch, the
sluice module, the sluice-coordinator and sluice-worker binaries) fails the test instead: CI that cannot install it
is broken, and a skip would look like a pass. Dependencies that scripts/test.sh cannot install
(JAX and TensorFlow are not packaged in Debian 12) skip everywhere; call pytest.importorskip
for those.
"""

import importlib
import importlib.machinery
import importlib.util
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


def sluice_module_missing():
    """Why ``import sluice`` would not give the built module, or None when it would. The build
    folder has a sluice/ directory from configure time on, so an unbuilt module does not fail
    to import: it imports as an empty namespace package, and each test would fail on a name it
    lacks rather than say what is missing."""
    spec = importlib.util.find_spec("sluice")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if spec is not None and spec.origin is not None and any(
            os.path.exists(os.path.join(folder, "_sluice" + suffix))
            for folder in folders for suffix in importlib.machinery.EXTENSION_SUFFIXES):
        return None
    return ("the sluice Python module is not built (no sluice/__init__.py with its _sluice "
            "extension in %s; cmake --build %s --target sluice_python, or scripts/test.sh)"
            % (", ".join(folders) or "sys.path", sluice_cluster.BUILD_DIR))
