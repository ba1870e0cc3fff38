// The custom heaps of this process (include/droidheap/heaps.h) as the client sees them: every
// registry the program made, every heap in them with the number it keeps for the life of the
// process (1 to kMaxCustomHeaps), and which of them the current session records.
//
// One per process: static state of the client library, never destroyed. Attach runs on whichever
// program thread registers a heap, StartSession on the thread that installs a session; a mutex
// orders them (neither is inside a malloc hook). StopSession may run inside a hook, at a teardown,
// and takes no lock: it only clears the heaps' flags.
#pragma once

#include "client/client.h"
#include "droidheap/heaps.h"

namespace droidheap {

class CustomHeaps {
 public:
  // `client` starts recording: names the client page (once per process) so that registries made
  // from now on find it, attaches the registries made so far, and enables the heaps the session
  // records, their reports going to `report`.
  static void StartSession(Client* client, droidheap_report_fn report);
  // The session ended: no heap reports to it any more.
  static void StopSession();
  // In a forked child, before anything else: the lock may have been held by a thread the child
  // does not have.
  static void ResetInChild();
  // droidheap_attach_fn: a registry with a heap the client may not know yet.
  static void Attach(droidheap_registry* registry);
};

}  // namespace droidheap
