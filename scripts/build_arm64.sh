#!/usr/bin/env bash
# Builds the arm64-v8a emulator-device binaries (cross compiler + qemu-user, Debian packages
# g++-aarch64-linux-gnu and qemu-user) into the installed droidheap package, or into DEST.
#   scripts/build_arm64.sh [DEST]
# DEST defaults to the directory beside the installed x86_64 emulator binaries: <site-packages>/
# droidheap/bin/linux for a normal install and for an editable one alike (`pip install -e` leaves the
# package in this tree but puts its binaries into site-packages, where droidheap looks too).
# scripts/install runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
if [ $# -ge 1 ]; then
  dest=$1
else
  dest=$(env -u DROIDHEAP_BIN_DIR "$python" - <<'PY'
import os
from droidheap import native
from droidheap.device.local import host_abi
from droidheap.errors import DroidheapError
try:
    print(native.binary_dir(host_abi(), target=native.LINUX).parent)
except DroidheapError:  # no host binaries installed: the package's own directory for them
    print(os.path.join(os.path.dirname(native.__file__), "bin", native.LINUX))
PY
)
fi
build=build/arm64-v8a
cmake -S ndk_client -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/ndk_client/cmake/aarch64-linux-gnu.cmake" >/dev/null
cmake --build "$build" -j "$(nproc)"
rm -rf "$build/install"
cmake --install "$build" --prefix "$build/install" >/dev/null
mkdir -p "$dest/arm64-v8a"
cp -r "$build"/install/droidheap/bin/linux/arm64-v8a/* "$dest/arm64-v8a/"
echo "arm64-v8a binaries in $dest/arm64-v8a"
