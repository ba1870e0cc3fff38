# 32-bit x86 (the x86 ABI) on an x86_64 Debian host with the host's g++ and -m32 (packages
# gcc-N-multilib and g++-N-multilib, which scripts/install adds). Used for the native unit tests
# (tests/conftest.py); the binaries run natively.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR i686)
set(CMAKE_C_COMPILER gcc)
set(CMAKE_CXX_COMPILER g++)
set(CMAKE_ASM_COMPILER gcc)

set(_droidheap_m32 "-m32")
# <asm/...> for -m32: Debian puts the kernel's bi-arch asm headers in the x86_64 multiarch
# directory, which -m32 does not search; the gcc-multilib metapackage adds a /usr/include/asm link
# but conflicts with every cross compiler. Without that link, a directory holding just that link.
if(NOT EXISTS /usr/include/asm AND EXISTS /usr/include/x86_64-linux-gnu/asm)
  set(_droidheap_asm_dir "${CMAKE_BINARY_DIR}/i386-asm-include")
  if(NOT EXISTS "${_droidheap_asm_dir}/asm")
    file(MAKE_DIRECTORY "${_droidheap_asm_dir}")
    file(CREATE_LINK /usr/include/x86_64-linux-gnu/asm "${_droidheap_asm_dir}/asm" SYMBOLIC)
  endif()
  string(APPEND _droidheap_m32 " -idirafter ${_droidheap_asm_dir}")
endif()
set(CMAKE_C_FLAGS_INIT "${_droidheap_m32}")
set(CMAKE_CXX_FLAGS_INIT "${_droidheap_m32}")
set(CMAKE_ASM_FLAGS_INIT "${_droidheap_m32}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-m32")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-m32")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "-m32")
