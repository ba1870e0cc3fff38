#!/usr/bin/env bash
# Builds the arm64-v8a emulator-device binaries (cross compiler + qemu-user, Debian packages
# g++-aarch64-linux-gnu and qemu-user) into the installed droidheap package, or into DEST, in the
# build tree BUILD (default build/arm64-v8a).
#   scripts/build_arm64.sh [DEST [BUILD]]
# DEST defaults to the directory beside the installed x86_64 emulator binaries: <site-packages>/
# droidheap/bin/linux for a normal install and for an editable one alike (`pip install -e` leaves the
# package in this tree but puts its binaries into site-packages, where droidheap looks too).
# scripts/install runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/build_tree.sh
python=.venv/bin/python
[ -x "$python" ] || python=python3
if [ $# -ge 1 ]; then
  dest=$1
else
  dest=$(env -u DROIDHEAP_BIN_DIR "$python" -c \
         'from droidheap import native; print(native.installed_bin_dir() / native.LINUX)')
fi
install_missing g++-aarch64-linux-gnu
build_tree "$PWD/ndk_client/cmake/aarch64-linux-gnu.cmake" "${2:-build/arm64-v8a}" \
  droidheap/bin/linux/arm64-v8a "$dest/arm64-v8a"
echo "arm64-v8a binaries in $dest/arm64-v8a"
