#!/usr/bin/env bash
# Installs every build and run dependency of actorps from Debian's apt.
# Idempotent: does nothing when everything is installed already.
set -euo pipefail

packages=(
  cmake make g++                # build
  libcaf-dev                    # CAF 0.17.6: the actor framework
  libeigen3-dev                 # tensors
  libboost-program-options-dev  # the apps' command lines
  catch2                        # tests
  zlib1g-dev                    # reading the data set's .gz files
  pkg-config                    # the package test: the installed actorps.pc
  openssl                       # actorps-make-tls: a job CA and node certificates
  libssl-dev                    # mutual TLS between a job's nodes (runtime/tls.cpp)
  libucx-dev ucx-utils          # the UCX data plane (runtime/ucx), ucx_perftest
  clang libfuzzer-14-dev        # the fuzz targets (.ci/fuzz.sh)
  nlohmann-json3-dev            # JSON the programs write (bench figures)
  libspdlog-dev                 # the apps' log lines (UTC time, role, rank)
  prometheus-cpp-dev            # /metrics endpoints (runtime/metrics.cpp)
  python3-dev pybind11-dev      # the Python module (python/)
  python3-numpy python3-pytest  # its arrays and its tests
  python3-torch                 # torch tensors in and out, the PyTorch helper
  python3-matplotlib            # the training curves (python -m actorps.plot)
  dataset-fashion-mnist         # the training job's data
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null \
      | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
fi
