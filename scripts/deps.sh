#!/usr/bin/env bash
# Installs the Debian 12 packages Sluice builds with, when any is missing. Sourced by the other
# scripts; safe to run again (it installs nothing when all are present).
SLUICE_DEBIAN_PACKAGES=(
  g++ cmake make pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev openssl libcpp-httplib-dev
  liblz4-dev libzstd-dev  # wire compression of step frames: core/rpc/wire_compression.h
  libcurl4-openssl-dev libssl-dev  # object stores: core/io/object_store_file_system.h, core/io/aws_sigv4.h
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev  # image ops: core/data/ops/image_ops.h
  libsimdjson-dev  # jsonl_dataset: core/data/ops/jsonl_reader.h
  libsentencepiece-dev sentencepiece  # tokenize (core/data/ops/tokenize_fn.cc); spm_train/spm_encode in its tests
  python3-yaml  # tests/deploy/manifests_test.py
  # The Python package (python/) and its tests: built for Debian's /usr/bin/python3.
  pybind11-dev python3-dev python3-numpy python3-pytest
  python3-torch  # sluice.torch and its DDP test (python/tests/test_torch_ddp.py)
)

sluice_install_deps() {
  local missing=()
  local p
  for p in "${SLUICE_DEBIAN_PACKAGES[@]}" "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  echo "sluice: installing missing Debian packages: ${missing[*]}"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "sluice: need root or sudo to install ${missing[*]}" >&2; return 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Configures and builds into ${SLUICE_BUILD:-build}/ with every core (ccache when installed).
sluice_build() {
  local dir="${SLUICE_BUILD:-build}"
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@"
  cmake --build "$dir" -j"$(nproc)"
}
