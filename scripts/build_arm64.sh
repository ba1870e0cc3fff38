#!/usr/bin/env bash
# Builds the arm64-v8a emulator-device binaries (cross compiler + qemu-user, Debian packages
# g++-aarch64-linux-gnu and qemu-user) into the installed droidheap package, or into DEST.
#   scripts/build_arm64.sh [DEST]      DEST defaults to <installed droidheap>/bin
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
dest=${1:-$("$python" -c 'import droidheap, os; print(os.path.join(os.path.dirname(droidheap.__file__), "bin"))')}
build=build/arm64-v8a
cmake -S ndk_client -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/ndk_client/cmake/aarch64-linux-gnu.cmake" >/dev/null
cmake --build "$build" -j "$(nproc)"
cmake --install "$build" --prefix "$build/install" >/dev/null
mkdir -p "$dest/arm64-v8a"
cp "$build"/install/droidheap/bin/arm64-v8a/* "$dest/arm64-v8a/"
echo "arm64-v8a binaries in $dest/arm64-v8a"
