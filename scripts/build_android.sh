#!/usr/bin/env bash
# Builds droidheap's Android binaries without an NDK: Debian's clang 14 and lld over a sysroot made
# from bionic's headers and start files and Android 10's own libraries (scripts/android_sysroot.sh,
# from ANDROID_DIR, default ../shared/android), with the same CMake description an NDK builds
# (ndk_client/CMakeLists.txt; the toolchain file ndk_client/cmake/android-sysroot.cmake stands in
# for the NDK's). Installs what cmake --install installs into DEST/<abi>/, as scripts/build_ndk.sh
# does. scripts/build_ndk.sh NDK_DIR stays the release route.
#   scripts/build_android.sh [--dest DEST] [--build BUILD] [--android ANDROID_DIR] [ABI...]
# ABI: arm64-v8a, armeabi-v7a (the default: what phones run), x86_64, x86 (Android's emulators;
# linked against stubs, see android_sysroot.sh). Build trees: BUILD/android-<abi>, the sysroot
# BUILD/android-sysroot (default BUILD: build/ of this source tree).
# DEST defaults to droidheap/bin of the installed package (droidheap.native.installed_bin_dir),
# where droidheap finds Android binaries; scripts/install runs this.
#
# The C++ runtime. Code loaded into apps (heapprofd_client.so, libdroidheap_preload.so) needs none
# at run time: C only at its link (CMakeLists.txt), -fno-exceptions -fno-rtti, and --as-needed
# (the toolchain file), so its NEEDED are bionic's libc, libm, libdl -- what every app's linker
# namespace has (tests/unit/test_build_android.py checks). droidheapd uses the C++ library. The NDK
# links it statically (c++_static); no Android libc++.a exists here, so droidheapd is linked
# against the platform's own /system/lib{64}/libc++.so with Debian's libc++ 14 headers (the same
# std::__1 ABI), every symbol resolved at link time against Android 10's library. On a phone:
# droidheapd runs from /data/local/tmp, whose linker namespace on Android 10 and later searches
# /system/lib{64} (the platform's heapprofd links the same libc++.so), so it loads there; the
# platform's libc++.so is no stable API, so a newer Android that dropped a symbol libc++ 14's
# headers use would refuse to start droidheapd, naming the symbol. The NDK's build has no such
# dependency: release builds stay with scripts/build_ndk.sh.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
. scripts/build_tree.sh
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }

api=29  # as scripts/build_ndk.sh, which says why
all_abis=(arm64-v8a armeabi-v7a x86_64 x86)
usage="usage: scripts/build_android.sh [--dest DEST] [--build BUILD] [--android ANDROID_DIR]"
usage+=" [ABI...]   (ABI: ${all_abis[*]})"
die() { echo "build_android.sh: $*" >&2; exit 1; }

dest=
build_root=$PWD/build
android=$(realpath -m ../shared/android)
while [ $# -gt 0 ]; do
  case "$1" in
    --dest|--build|--android)
      [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
      case "$1" in
        --dest) dest=$(absolute "$2") ;;
        --build) build_root=$(absolute "$2") ;;
        --android) android=$(absolute "$2") ;;
      esac
      shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
abis=("$@")
[ ${#abis[@]} -gt 0 ] || abis=(arm64-v8a armeabi-v7a)
for abi in "${abis[@]}"; do
  [[ " ${all_abis[*]} " == *" $abi "* ]] || die "unknown ABI $abi (known: ${all_abis[*]})"
done
[ -d "$android" ] || die "no $android (bionic's headers and Android 10's rootfs, see its README)"
# LLVM 14's clang, lld and llvm-ar (ndk_client/cmake/android-sysroot.cmake), libc++ 14's headers.
install_missing clang-14 lld-14 llvm-14 libc++-14-dev
if [ -z "$dest" ]; then
  python=.venv/bin/python
  [ -x "$python" ] || python=python3
  dest=$(env -u DROIDHEAP_BIN_DIR "$python" -c \
         'from droidheap import native; print(native.installed_bin_dir())')
fi

sysroot=$build_root/android-sysroot
scripts/android_sysroot.sh "$android" "$sysroot" "${abis[@]}"
toolchain=$PWD/ndk_client/cmake/android-sysroot.cmake
for abi in "${abis[@]}"; do
  build_tree "$toolchain" "$build_root/android-$abi" "droidheap/bin/$abi" "$dest/$abi" \
    -DANDROID_ABI="$abi" -DANDROID_PLATFORM="android-$api" -DDROIDHEAP_ANDROID_SYSROOT="$sysroot"
  echo "$abi: $dest/$abi"
done
