// Tells the hooks whether they still run in the process that connected to the daemon, or in a
// child that inherited them: a fork() child, a raw clone() child (which runs no atfork handler),
// a vfork() child. Such a child must never write records: the shared buffer it inherited is the
// parent's, and the daemon books every record against the parent.
//
// Created by Client::Connect, read by every thread on each sampled allocation and sampled free.
//
// bionic caches the pid in the thread (and clears the cache in a vfork child), so getpid() is the
// answer and costs no system call. glibc caches nothing: a getpid() per sample was a seventh of
// the profiled program's time at -i 1. There a page advised MADV_WIPEONFORK holds a mark that any
// child without CLONE_VM finds zeroed. The advice is trusted only once the kernel shows it in
// /proc/self/smaps: qemu-user accepts it and does nothing. A vfork() child shares the page and is
// not detected on glibc; it shares the parent's heap too, and may only exec or _exit anyway.
#pragma once

#include <stdint.h>
#include <unistd.h>

#include "common/platform.h"

namespace droidheap {

class ProcessIdentity {
 public:
  // Remembers the calling process. Call once, before the hooks are installed.
  void Init();

  bool InOriginalProcess() const {
    if (mark_ != nullptr) return *mark_ != 0;
    return getpid() == pid_;
  }
  int pid() const { return pid_; }
  // Whether InOriginalProcess() answers without a system call.
  bool answers_without_syscall() const { return kLibcCachesPid || mark_ != nullptr; }

 private:
  int pid_ = 0;
  const volatile uint64_t* mark_ = nullptr;  // the wiped-on-fork page, where the kernel wipes it
};

}  // namespace droidheap
