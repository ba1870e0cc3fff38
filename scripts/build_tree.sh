# Sourced by scripts/build_ndk.sh, build_android.sh and build_arm64.sh: the one way they configure,
# build and install ndk_client/ for an ABI.
#   build_tree TOOLCHAIN_FILE BUILD_DIR INSTALLED DEST [CMAKE ARGS...]
# INSTALLED is what `cmake --install` puts the ABI's binaries in (droidheap/bin/<abi> for Android,
# droidheap/bin/linux/<abi> for Linux), copied into DEST. Run from the source tree's root.
# One builder at a time in a tree (the lock file BUILD_DIR.lock, which the tests' builds of the
# same trees take too, tests/build_lock.py): scripts/install, scripts/build_wheel and the tests
# may build one tree at once.
. scripts/apt_packages.sh
build_tree() {
  local toolchain=$1 build=$2 installed=$3 dest=$4 lock
  shift 4
  mkdir -p "$(dirname "$build")"
  exec {lock}>"$build.lock"
  flock "$lock"
  # CMake's default generator runs make (a package cmake only recommends).
  install_missing cmake make
  # CMake keeps the toolchain file a tree was configured with: one configured with another (another
  # NDK, or the other Android route) starts afresh.
  if [ -f "$build/CMakeCache.txt" ] &&
     ! grep -qx "CMAKE_TOOLCHAIN_FILE:[A-Z]*=$toolchain" "$build/CMakeCache.txt"; then
    rm -rf "$build"
  fi
  # No native tests in what is installed (the tests may have configured this tree with them).
  cmake -S ndk_client -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DDROIDHEAP_BUILD_TESTS=OFF "$@" >/dev/null
  cmake --build "$build" -j "$(nproc)"
  rm -rf "$build/install"
  cmake --install "$build" --prefix "$build/install" >/dev/null
  mkdir -p "$dest"
  cp -r "$build/install/$installed"/* "$dest/"
  exec {lock}>&-
}
