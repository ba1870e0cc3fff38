#!/usr/bin/env bash
# Builds droidheapd and heapprofd_client.so for Android with the NDK, for every ABI droidheap
# supports on phones, into the installed droidheap package (or DEST).
#   scripts/build_ndk.sh NDK_PATH [DEST] [MIN_API]
# NDK_PATH is an unpacked Android NDK (r23 or newer). MIN_API defaults to 29 (Android 10, the
# first release whose bionic loads heapprofd_client.so).
set -euo pipefail
cd "$(dirname "$0")/.."
ndk=${1:?usage: scripts/build_ndk.sh NDK_PATH [DEST] [MIN_API]}
toolchain="$ndk/build/cmake/android.toolchain.cmake"
[ -f "$toolchain" ] || { echo "build_ndk.sh: no NDK at $ndk ($toolchain missing)" >&2; exit 1; }
python=.venv/bin/python
[ -x "$python" ] || python=python3
dest=${2:-$("$python" -c 'import droidheap, os; print(os.path.join(os.path.dirname(droidheap.__file__), "bin"))')}
api=${3:-29}
for abi in arm64-v8a x86_64; do
  build="build/ndk-$abi"
  cmake -S ndk_client -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DANDROID_ABI="$abi" -DANDROID_PLATFORM="android-$api" \
    -DDROIDHEAP_INSTALL_DIR="droidheap/bin/android-$abi" >/dev/null
  cmake --build "$build" -j "$(nproc)"
  cmake --install "$build" --prefix "$build/install" >/dev/null
  mkdir -p "$dest/android-$abi"
  cp "$build/install/droidheap/bin/android-$abi"/* "$dest/android-$abi/"
  echo "$abi: $dest/android-$abi"
done
