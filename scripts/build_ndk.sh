#!/usr/bin/env bash
# Builds droidheap's device binaries for Android with the NDK: heapprofd_client.so, droidheapd and
# every other target ndk_client/ installs (cmake --install; the emulation layer is Linux-only and
# left out under ANDROID), for each ABI given (default: all four), into DEST/<abi>/.
#   scripts/build_ndk.sh [--dest DEST] [--build BUILD] NDK_DIR [ABI...]
# NDK_DIR is an unpacked Android NDK (r23 or newer); ABI is arm64-v8a, armeabi-v7a, x86_64 or x86.
# The build trees are BUILD/ndk-<abi> (default: build/ of this source tree).
# DEST defaults to droidheap/bin of this source tree, the package data a release wheel ships
# (docs/devices.md, "ABIs"); the Linux emulator's binaries are elsewhere, in droidheap/bin/linux/<abi>/.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
. scripts/build_tree.sh
# Paths on the command line are the caller's, relative to where the script was started.
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }

# API 29 (Android 10), not lower: the code loaded into apps keeps its per-thread state in
# thread_local (common/platform.h), and below API 29 the NDK emulates thread_local with a malloc on
# each thread's first use -- inside our own malloc hooks, which it would re-enter without end
# (CMakeLists.txt refuses such a build). Nothing else needs more than API 23 (sigqueue; 64-bit file
# offsets in 32-bit builds need 21), and memfd_create is called through syscall(), not bionic's
# API 30 wrapper. 29 is also where bionic's own heapprofd hooks appear. Android 8-9 (API 26-28,
# for the LD_PRELOAD route) would first need that state kept without emulated TLS.
api=29
all_abis=(arm64-v8a armeabi-v7a x86_64 x86)
usage="usage: scripts/build_ndk.sh [--dest DEST] [--build BUILD] NDK_DIR [ABI...]"
usage+="   (ABI: ${all_abis[*]})"

die() { echo "build_ndk.sh: $*" >&2; exit 1; }

dest=$PWD/droidheap/bin
build_root=build
while [ $# -gt 0 ]; do
  case "$1" in
    --dest|--build)
      [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
      if [ "$1" = --dest ]; then dest=$(absolute "$2"); else build_root=$(absolute "$2"); fi
      shift 2 ;;
    --dest=*) dest=$(absolute "${1#--dest=}"); shift ;;
    --build=*) build_root=$(absolute "${1#--build=}"); shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
ndk=$(absolute "$1")
shift
[ -d "$ndk" ] || die "no NDK at $ndk (not a directory)"
toolchain=$ndk/build/cmake/android.toolchain.cmake
[ -f "$toolchain" ] || die "no NDK at $ndk: $toolchain is missing"

abis=("$@")
[ ${#abis[@]} -gt 0 ] || abis=("${all_abis[@]}")
for abi in "${abis[@]}"; do
  [[ " ${all_abis[*]} " == *" $abi "* ]] || die "unknown ABI $abi (known: ${all_abis[*]})"
done

for abi in "${abis[@]}"; do
  # c++_static: droidheapd runs from /data/local/tmp, where no libc++_shared.so is. Thumb-2 for
  # armeabi-v7a (the NDK's default, stated): the frame-pointer fallback follows r7, Thumb's.
  build_tree "$toolchain" "$build_root/ndk-$abi" "droidheap/bin/$abi" "$dest/$abi" \
    -DANDROID_ABI="$abi" -DANDROID_PLATFORM="android-$api" -DANDROID_STL=c++_static \
    -DANDROID_ARM_MODE=thumb
  echo "$abi: $dest/$abi"
done
