# Android without an NDK: Debian's clang 14 and lld over a sysroot that scripts/android_sysroot.sh
# made from bionic's headers and Android 10's libraries (scripts/build_android.sh passes this file).
# Gives CMakeLists.txt what the NDK's toolchain file gives it -- ANDROID, ANDROID_ABI,
# ANDROID_PLATFORM_LEVEL -- and the NDK's default flags, so that this build is the NDK's build.
#   -DANDROID_ABI=arm64-v8a|armeabi-v7a|x86_64|x86 -DANDROID_PLATFORM=android-29
#   -DDROIDHEAP_ANDROID_SYSROOT=<sysroot>
# CMAKE_SYSTEM_NAME stays Linux: CMake's own Android platform module would look for an NDK.
cmake_minimum_required(VERSION 3.18)
# try_compile re-reads this file in a project of its own: hand it the same choices.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ANDROID_ABI ANDROID_PLATFORM
     DROIDHEAP_ANDROID_SYSROOT)

set(ANDROID TRUE)
set(CMAKE_SYSTEM_NAME Linux)
if(NOT ANDROID_PLATFORM)
  set(ANDROID_PLATFORM android-29)
endif()
string(REGEX REPLACE "^android-" "" ANDROID_PLATFORM_LEVEL "${ANDROID_PLATFORM}")
if(ANDROID_ABI STREQUAL "arm64-v8a")
  set(CMAKE_SYSTEM_PROCESSOR aarch64)
  set(_droidheap_triple aarch64-linux-android)
elseif(ANDROID_ABI STREQUAL "armeabi-v7a")
  set(CMAKE_SYSTEM_PROCESSOR armv7-a)
  set(_droidheap_triple armv7a-linux-androideabi)
elseif(ANDROID_ABI STREQUAL "x86_64")
  set(CMAKE_SYSTEM_PROCESSOR x86_64)
  set(_droidheap_triple x86_64-linux-android)
elseif(ANDROID_ABI STREQUAL "x86")
  set(CMAKE_SYSTEM_PROCESSOR i686)
  set(_droidheap_triple i686-linux-android)
else()
  message(FATAL_ERROR "ANDROID_ABI: arm64-v8a, armeabi-v7a, x86_64 or x86 (got '${ANDROID_ABI}')")
endif()
if(NOT IS_DIRECTORY "${DROIDHEAP_ANDROID_SYSROOT}/usr/include")
  message(FATAL_ERROR "DROIDHEAP_ANDROID_SYSROOT: no sysroot at '${DROIDHEAP_ANDROID_SYSROOT}' "
                      "(scripts/android_sysroot.sh makes one)")
endif()

# LLVM 14's own directory, where clang finds ld.lld for -fuse-ld=lld (Debian: lld-14; /usr/bin has
# only ld.lld-14).
set(CMAKE_C_COMPILER /usr/lib/llvm-14/bin/clang)
set(CMAKE_CXX_COMPILER /usr/lib/llvm-14/bin/clang++)
set(CMAKE_ASM_COMPILER /usr/lib/llvm-14/bin/clang)
# LLVM's archiver (llvm-14), which indexes every target's objects; binutils' ar, which CMake would
# take without it, knows only this machine's.
set(CMAKE_AR /usr/lib/llvm-14/bin/llvm-ar CACHE FILEPATH "")
set(CMAKE_RANLIB /usr/lib/llvm-14/bin/llvm-ranlib CACHE FILEPATH "")
foreach(lang C CXX ASM)
  set(CMAKE_${lang}_COMPILER_TARGET "${_droidheap_triple}${ANDROID_PLATFORM_LEVEL}")
endforeach()
set(CMAKE_SYSROOT "${DROIDHEAP_ANDROID_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${DROIDHEAP_ANDROID_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)

# The NDK's defaults (r23+, build/cmake/flags.cmake), plus what clang 14 needs to match them:
# - -fno-emulated-tls: clang 14 emulates TLS for every Android level, and bionic then refuses the
#   client (`cannot locate symbol "__emutls_get_address"`); the NDK uses ELF TLS from API 29.
# - -mthumb for armeabi-v7a: build_ndk.sh's ANDROID_ARM_MODE=thumb (the frame-pointer fallback
#   follows r7, Thumb's).
# - -stdlib=libc++: Debian's clang links libstdc++ by default, Android's driver libc++ (the
#   sysroot's usr/include/c++/v1 and libc++.so).
# - -fno-exceptions for C++: the platform's libc++.so, what droidheapd links here (the NDK links
#   c++_static instead), comes without an unwinder to link against (no _Unwind_Resume), and no
#   code of ours catches; a throw from libc++ ends in abort() either way.
set(_droidheap_flags "-DANDROID -fdata-sections -ffunction-sections -funwind-tables")
string(APPEND _droidheap_flags " -fstack-protector-strong -no-canonical-prefixes")
string(APPEND _droidheap_flags " -D_FORTIFY_SOURCE=2")
string(APPEND _droidheap_flags " -Wformat -Werror=format-security -fno-emulated-tls")
if(ANDROID_ABI STREQUAL "armeabi-v7a")
  string(APPEND _droidheap_flags " -mthumb")
endif()
set(CMAKE_C_FLAGS_INIT "${_droidheap_flags}")
set(CMAKE_ASM_FLAGS_INIT "${_droidheap_flags}")
set(CMAKE_CXX_FLAGS_INIT "${_droidheap_flags} -stdlib=libc++ -fno-exceptions")
# lld (Debian: lld-14), and every reference resolved at link time against Android's own libraries
# (or, for x86 and x86_64, their stubs): a symbol missing on the phone fails the build here.
# -nostdlib++, and libc++ named only for what is linked as C++: CMake adds the C++ compiler's
# implicit libraries to every target with C++ sources, the code loaded into apps too (linked as C,
# CMakeLists.txt), where libc++.so would become NEEDED.
# -lgcc before the objects: lld binds a symbol to the first file that offers it, and on 32-bit ARM
# Android's libm.so (LIBC_DEPRECATED) and libc++.so re-export compiler builtins (__aeabi_d2lz,
# __aeabi_uldivmod ...) that the NDK's builds take from its static builtins library; likewise
# libc before libc++ for the __aeabi_mem* functions that libc.so exports (LIBC_N) and libc++.so
# repeats.
set(_droidheap_link "-fuse-ld=lld -nostdlib++ -lgcc -Wl,--build-id=sha1 -Wl,--fatal-warnings")
string(APPEND _droidheap_link " -Wl,--gc-sections -Wl,--no-undefined -Qunused-arguments")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_droidheap_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_droidheap_link}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_droidheap_link}")
set(CMAKE_CXX_STANDARD_LIBRARIES_INIT "-lc -lc++")
