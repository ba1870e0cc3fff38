// Tells the hooks whether they still run in the process that connected to the daemon, or in a
// child that inherited them: a fork() child, a raw clone() child (which runs no atfork handler),
// a vfork() child. Such a child must never write records: the shared buffer it inherited is the
// parent's, and the daemon books every record against the parent.
//
// Created by Client::Connect, read by every thread on each sampled allocation and sampled free.
//
// A page advised MADV_WIPEONFORK (Linux 4.14 and later) holds a mark that any child without
// CLONE_VM finds zeroed, the raw clone() child too. The advice is trusted only once the kernel shows
// it in /proc/self/smaps: qemu-user accepts it and does nothing. Without the mark, getpid():
// - bionic caches the pid in the thread, so getpid() costs no system call; its fork() and vfork()
//   reset the cache in the child, but a raw clone() child keeps the parent's pid there, and goes
//   undetected without the mark. With the mark, the cached getpid() still catches a vfork() child,
//   which shares the page.
// - glibc caches nothing: a getpid() per sample was a seventh of the profiled program's time at
//   -i 1, so with the mark it is not asked. A vfork() child shares the page and is not detected on
//   glibc then; it shares the parent's heap too, and may only exec or _exit anyway.
#pragma once

#include <stdint.h>
#include <unistd.h>

#include "common/platform.h"

namespace droidheap {

// A page of zeroes that the kernel wipes again in every child without CLONE_VM (fork() and raw
// clone() children alike), or nullptr where it does not (before Linux 4.14, qemu-user). Never to be
// unmapped: the hooks read it.
void* MapPageWipedOnFork();

class ProcessIdentity {
 public:
  // Remembers the calling process. Call once, before the hooks are installed.
  void Init();

  bool InOriginalProcess() const {
    if (mark_ != nullptr) {
      if (*mark_ == 0) return false;
      if (!kLibcCachesPid) return true;
    }
    return getpid() == pid_;
  }
  int pid() const { return pid_; }
  // Whether InOriginalProcess() answers without a system call.
  bool answers_without_syscall() const { return kLibcCachesPid || mark_ != nullptr; }
  // Whether a raw clone() child is told apart (bionic's cached pid alone cannot).
  bool detects_raw_clone() const { return !kLibcCachesPid || mark_ != nullptr; }

 private:
  int pid_ = 0;
  const volatile uint64_t* mark_ = nullptr;  // the wiped-on-fork page, where the kernel wipes it
};

}  // namespace droidheap
