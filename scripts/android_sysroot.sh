#!/usr/bin/env bash
# Prepares an Android 10 (API 29) sysroot for Debian's clang from bionic's headers and start files
# and Android's own libraries (../shared/android, README.md there), laid out as the NDK's sysroot
# is, where clang's Android driver looks (clang --target=<triple>29 --sysroot=SYSROOT -###):
#   usr/include/                      bionic's libc/include + the kernel's uapi + android/uapi
#   usr/include/<triple>/asm/         the kernel's asm-<arch>/asm
#   usr/include/c++/v1                Debian's libc++ 14 headers (libc++-14-dev), a symlink
#   usr/lib/<triple>/29/              crtbegin_dynamic.o crtend_android.o crtbegin_so.o crtend_so.o
#                                     (compiled from bionic's arch-common/bionic), the libraries
#                                     to link against, and libgcc.a (below)
#   scripts/android_sysroot.sh ANDROID_DIR SYSROOT [ABI...]
# ANDROID_DIR holds bionic-android10-headers.tar.xz and android10-arm64-rootfs.tar.xz, and may hold
# android11-x86_64-rootfs.tar.xz. An ABI is redone only when an archive, this script or
# android_stubs.py is newer than SYSROOT/<abi>.done.
# scripts/build_android.sh runs it.
#
# What is linked against, per ABI:
# - arm64-v8a, armeabi-v7a: the rootfs's own /system/lib64 and /system/lib libraries (libc, libm,
#   libdl, liblog, libc++), so a link that succeeds here resolves against what Android 10 exports.
# - x86_64: Android 11's own /system/lib64 libraries when android11-x86_64-rootfs.tar.xz is there
#   (the headers stay API 29's, so nothing newer than Android 10 is referenced), which the Android 11
#   test device runs natively; stubs otherwise, as x86.
# - x86: no such libraries exist here, so stubs (scripts/android_stubs.py): libc's from
#   libc.map.txt for that ABI at API 29 (public symbols only, as the NDK's stubs), the others from
#   the same-bitness ARM library's dynamic symbols. Such builds are only compiled and linked here.
# - libgcc.a: compiler builtins (64-bit division on 32-bit ABIs, aarch64's outline atomics) linked
#   statically and hidden, as the NDK links its libclang_rt.builtins; Android's driver in clang 14
#   asks for -lgcc. From Debian's GCC 12 for each architecture (armel: the same base AAPCS as
#   armeabi-v7a's softfp; the functions are the processor's, not the C library's).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt_packages.sh
script=$PWD/scripts/android_sysroot.sh
stub_maker=$PWD/scripts/android_stubs.py
usage="usage: scripts/android_sysroot.sh ANDROID_DIR SYSROOT [ABI...]"
die() { echo "android_sysroot.sh: $*" >&2; exit 1; }
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
android=$(realpath "$1")
sysroot=$(realpath -m "$2")
shift 2
headers=$android/bionic-android10-headers.tar.xz
rootfs=$android/android10-arm64-rootfs.tar.xz
[ -f "$headers" ] && [ -f "$rootfs" ] || die "no $headers or $rootfs"
rootfs_x86_64=$android/android11-x86_64-rootfs.tar.xz
api=29
# One run at a time per sysroot (the tests run in two processes, each may ask for one): the others
# wait here, then find their ABIs done.
mkdir -p "$(dirname "$sysroot")"
exec 9>"$sysroot.lock"
flock 9
# LLVM 14's own directory: its clang finds its ld.lld for -fuse-ld=lld.
llvm=/usr/lib/llvm-14/bin
abis=("$@")
[ ${#abis[@]} -gt 0 ] || abis=(arm64-v8a armeabi-v7a x86_64 x86)

# The GCC 12 libgcc.a of each architecture, and the Debian package that has it.
libgcc_of() {
  case "$1" in
    arm64-v8a) echo /usr/lib/gcc-cross/aarch64-linux-gnu/12/libgcc.a libgcc-12-dev-arm64-cross ;;
    armeabi-v7a) echo /usr/lib/gcc-cross/arm-linux-gnueabi/12/libgcc.a libgcc-12-dev-armel-cross ;;
    x86_64) echo /usr/lib/gcc/x86_64-linux-gnu/12/libgcc.a libgcc-12-dev ;;
    x86) echo /usr/lib/gcc/x86_64-linux-gnu/12/32/libgcc.a lib32gcc-12-dev ;;
  esac
}

# xz: the archives are .tar.xz; python3: android_stubs.py.
install_missing xz-utils clang-14 lld-14 python3 \
  $(for abi in "${abis[@]}"; do libgcc_of "$abi" | cut -d' ' -f2; done)

up_to_date() {
  [ -f "$sysroot/$1.done" ] && [ "$sysroot/$1.done" -nt "$headers" ] &&
    [ "$sysroot/$1.done" -nt "$rootfs" ] && [ "$sysroot/$1.done" -nt "$script" ] &&
    [ "$sysroot/$1.done" -nt "$stub_maker" ] &&
    { [ ! -f "$rootfs_x86_64" ] || [ "$sysroot/$1.done" -nt "$rootfs_x86_64" ]; }
}
# The headers are common to every ABI (each ABI's asm/ among them): new headers, a new sysroot.
up_to_date headers || rm -rf "$sysroot"
todo=()
for abi in "${abis[@]}"; do up_to_date "$abi" || todo+=("$abi"); done
[ ${#todo[@]} -gt 0 ] || exit 0

work=$sysroot/unpacked
rm -rf "$work"
mkdir -p "$work/rootfs"
tar -xJf "$headers" -C "$work"
tar -xJf "$rootfs" -C "$work/rootfs"
if [ -f "$rootfs_x86_64" ]; then
  mkdir -p "$work/rootfs-x86_64"
  tar -xJf "$rootfs_x86_64" -C "$work/rootfs-x86_64"
fi
libc=$work/bionic/libc
# The rootfs's links are absolute within it (/system/lib64/libc.so -> /apex/com.android.runtime/...,
# /apex/com.android.runtime -> /system/apex/...): point them into the unpacked copy.
for tree in "$work"/rootfs*; do
  find "$tree" -type l -lname '/*' | while read -r link; do
    ln -sfn "$tree$(readlink "$link")" "$link"
  done
done
# A file of the ABI's userland ($tree, set per ABI below), its links followed.
rootfs_file() { readlink -f "$work/$tree/$1"; }
# crtbegin.c for x86 includes bionic's __stack_chk_fail_local.h, which the archive lacks: the
# hidden __stack_chk_fail_local that i386 code calls when stack protection fails.
mkdir -p "$libc/arch-x86/bionic"
cat > "$libc/arch-x86/bionic/__stack_chk_fail_local.h" <<'EOF'
void __stack_chk_fail(void);
__attribute__((visibility("hidden"))) void __stack_chk_fail_local(void) { __stack_chk_fail(); }
EOF

if ! up_to_date headers; then
  mkdir -p "$sysroot/usr/include"
  cp -r "$libc/include/." "$sysroot/usr/include/"
  for dir in "$libc"/kernel/uapi/*; do
    case "${dir##*/}" in
      asm-generic) cp -r "$dir" "$sysroot/usr/include/" ;;
      asm-*) ;;  # per ABI, in usr/include/<triple>/asm (below)
      *) cp -r "$dir" "$sysroot/usr/include/" ;;
    esac
  done
  cp -r "$libc/kernel/android/uapi/." "$sysroot/usr/include/"
  mkdir "$sysroot/usr/include/c++"
  ln -s /usr/lib/llvm-14/include/c++/v1 "$sysroot/usr/include/c++/v1"
  touch "$sysroot/headers.done"
fi

for abi in "${todo[@]}"; do
  case "$abi" in
    arm64-v8a) triple=aarch64-linux-android arch=arm64 lib=lib64 stubs= tree=rootfs ;;
    armeabi-v7a) triple=arm-linux-androideabi arch=arm lib=lib stubs= tree=rootfs ;;
    x86_64) triple=x86_64-linux-android arch=x86 lib=lib64 stubs=yes tree=rootfs
            [ -f "$rootfs_x86_64" ] && stubs= tree=rootfs-x86_64 ;;
    x86) triple=i686-linux-android arch=x86 lib=lib stubs=yes tree=rootfs ;;
    *) die "unknown ABI $abi (known: arm64-v8a armeabi-v7a x86_64 x86)" ;;
  esac
  # clang's armv7a-linux-androideabi is arm-linux-androideabi in sysroot paths.
  target=${triple/#arm-/armv7a-}$api
  include=$sysroot/usr/include/$triple
  libdir=$sysroot/usr/lib/$triple/$api
  rm -rf "$include" "$libdir" "$sysroot/$abi.done"
  mkdir -p "$include" "$libdir"
  cp -r "$libc/kernel/uapi/asm-$arch/asm" "$include/asm"

  cc=("$llvm/clang" --target="$target" --sysroot="$sysroot" -O2 -fPIC -I"$libc"
      -DPLATFORM_SDK_VERSION=$api -c)
  crt=$libdir/crt
  mkdir -p "$crt"
  "${cc[@]}" "$libc/arch-common/bionic/crtbrand.S" -o "$crt/crtbrand.o"
  "${cc[@]}" "$libc/arch-common/bionic/crtbegin.c" -o "$crt/crtbegin.o"
  "${cc[@]}" "$libc/arch-common/bionic/crtbegin_so.c" -o "$crt/crtbegin_so.o"
  "${cc[@]}" -D__ASSEMBLY__ "$libc/arch-common/bionic/crtend.S" -o "$libdir/crtend_android.o"
  "${cc[@]}" -D__ASSEMBLY__ "$libc/arch-common/bionic/crtend_so.S" -o "$libdir/crtend_so.o"
  # The begin objects carry the note that names the API level, as the NDK's do.
  "$llvm/ld.lld" -r "$crt/crtbegin.o" "$crt/crtbrand.o" -o "$libdir/crtbegin_dynamic.o"
  "$llvm/ld.lld" -r "$crt/crtbegin_so.o" "$crt/crtbrand.o" -o "$libdir/crtbegin_so.o"
  rm -r "$crt"

  read -r libgcc package < <(libgcc_of "$abi")
  [ -f "$libgcc" ] || die "no $libgcc (Debian package $package)"
  cp "$libgcc" "$libdir/libgcc.a"
  if [ -z "$stubs" ]; then
    for name in libc.so libm.so libdl.so liblog.so libc++.so; do
      cp "$(rootfs_file "system/$lib/$name")" "$libdir/$name"
    done
  else  # modelled on the ARM libraries of the same bitness, system/$lib
    python3 "$stub_maker" --clang "$llvm/clang" --abi "$abi" --target "$target" \
      --map "$libc/libc.map.txt" --api $api --out "$libdir" \
      $(for name in libm.so libdl.so liblog.so libc++.so; do
          rootfs_file "system/$lib/$name"; done)
  fi
  touch "$sysroot/$abi.done"
done
rm -rf "$work"
