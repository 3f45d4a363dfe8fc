#!/usr/bin/env bash
# Builds Sluice and runs the whole test suite through CTest. Works on a fresh Debian 12 machine:
# installs what is missing first. Extra arguments go to ctest (e.g. -L core, -R Seed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
sluice_install_deps
# slurm-wlm and munge: only for the Slurm end-to-end test (ctest -L slurm), which skips without them.
sluice_install_deps slurm-wlm munge ||
  echo "sluice: slurm-wlm/munge not installed; the slurm test will skip" >&2
sluice_build
# moto[server] from PyPI for the storage tests (ctest -L storage), which skip without it.
sluice_install_storage_server() {
  local venv=build/storage-venv
  [[ -x $venv/bin/moto_server ]] && return 0
  sluice_install_deps python3-venv || return 1
  python3 -m venv "$venv" && "$venv/bin/pip" install -q 'moto[server]'
}
sluice_install_storage_server ||
  echo "sluice: could not install moto[server] into build/storage-venv; the storage tests will skip" >&2
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600 "$@"
