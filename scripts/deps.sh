#!/usr/bin/env bash
# deps.sh -- installs the Debian packages the build and the tests need, and
# only those that are missing. The one list of system packages of the project.
#
# Idempotent: with everything present it runs `dpkg -s` and nothing else (no
# apt-get update, no network). Needs root or sudo only when it must install.
set -euo pipefail

PACKAGES=(
  build-essential     # gcc, make, libc headers; gcc's ASan/UBSan runtimes
  cmake
  ninja-build
  pkg-config
  liblz4-dev          # IPC body compression LZ4_FRAME
  libzstd-dev         # IPC body compression ZSTD
  libjansson-dev      # JSON (arrow-testing golden descriptions, tools)
  zlib1g-dev
  libxxhash-dev       # hashing kernels
  libgrpc-dev         # Arrow Flight on gRPC's C core
  libprotobuf-c-dev   # Flight messages other than FlightData
  protobuf-c-compiler # protoc-c: generates them from proto/Flight.proto
  openssl             # test certificates for Flight over TLS
  clang               # clang-14: the libFuzzer builds (make fuzz)
  libclang-rt-14-dev  # clang's fuzzer/sanitizer runtimes
  python3-venv        # a Debian python3 able to make venvs, as a fallback
  iproute2            # ip netns, veth, bridge, tc: tests/python/test_netns.py
)

missing=()
for p in "${PACKAGES[@]}"; do
  # Installed means "install ok installed", not merely known to dpkg.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} Debian packages present"
  exit 0
fi

echo "deps: installing missing Debian packages: ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: apt-get not found; install these by hand: ${missing[*]}" >&2
  exit 1
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "deps: not root and no sudo; install these by hand: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Use-Pty=0 --no-install-recommends "${missing[@]}"
