#include "client/custom_heaps.h"

#include <pthread.h>
#include <stdint.h>

#include <atomic>

#include "protocol/wire_protocol.h"

namespace droidheap {
namespace {

static_assert(sizeof(droidheap_heap) == 128, "heaps.h layout");
static_assert(sizeof(droidheap_registry) <= DROIDHEAP_PAGE_SIZE, "heaps.h layout");
static_assert(DROIDHEAP_HEAP_NAME_SIZE == kHeapNameSize, "heaps.h and the protocol agree");

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
// The heaps seen, by number - 1; only ever appended to (StopSession reads them without the lock).
droidheap_heap* g_heaps[kMaxCustomHeaps];
std::atomic<uint32_t> g_heap_count{0};
// Under g_mutex.
Client* g_session = nullptr;
droidheap_report_fn g_report = nullptr;
bool g_client_page_named = false;

// Enables `heap` when the session records it, after telling the daemon its name; disables it
// otherwise. Under g_mutex.
void Configure(droidheap_heap* heap) {
  if (g_session == nullptr || !g_session->enabled() || !g_session->RecordsHeap(heap->name)) {
    __atomic_store_n(&heap->enabled, 0, __ATOMIC_RELEASE);
    return;
  }
  __atomic_store_n(&heap->report, reinterpret_cast<uintptr_t>(g_report), __ATOMIC_RELAXED);
  g_session->DeclareHeap(heap->number, heap->name);
  __atomic_store_n(&heap->enabled, 1, __ATOMIC_RELEASE);
}

// Numbers the registry's heaps the client has not seen, and configures them. Under g_mutex.
void AttachLocked(droidheap_registry* registry) {
  if (registry->magic != DROIDHEAP_REGISTRY_MAGIC || registry->version != DROIDHEAP_HEAPS_VERSION) {
    return;
  }
  // Before the walk: a heap registered after it sees `attach` and calls back (heaps.h).
  __atomic_store_n(&registry->attach, reinterpret_cast<uintptr_t>(&CustomHeaps::Attach),
                   __ATOMIC_SEQ_CST);
  uint32_t count = __atomic_load_n(&registry->heap_count, __ATOMIC_SEQ_CST);
  if (count > DROIDHEAP_REGISTRY_HEAPS) count = DROIDHEAP_REGISTRY_HEAPS;
  for (uint32_t i = 0; i < count; ++i) {
    droidheap_heap* heap = &registry->heaps[i];
    if (__atomic_load_n(&heap->ready, __ATOMIC_SEQ_CST) == 0 || heap->number != 0) continue;
    const uint32_t seen = g_heap_count.load(std::memory_order_relaxed);
    if (seen == kMaxCustomHeaps) return;  // more heaps than the protocol numbers: never recorded
    heap->name[DROIDHEAP_HEAP_NAME_SIZE - 1] = '\0';
    heap->number = seen + 1;
    g_heaps[seen] = heap;
    g_heap_count.store(seen + 1, std::memory_order_release);
    Configure(heap);
  }
}

int AttachFound(void* page, void* /*context*/) {
  AttachLocked(static_cast<droidheap_registry*>(page));
  return 0;  // every registry
}

// The page heaps.h looks for when it makes a registry. Under g_mutex.
void NameClientPage() {
  if (g_client_page_named) return;
  auto* page = static_cast<droidheap_client_page*>(droidheap_named_page(DROIDHEAP_CLIENT_PAGE));
  if (page == nullptr) return;  // registries made later are then found by the next session
  page->version = DROIDHEAP_HEAPS_VERSION;
  page->attach = reinterpret_cast<uintptr_t>(&CustomHeaps::Attach);
  __atomic_store_n(&page->magic, DROIDHEAP_CLIENT_MAGIC, __ATOMIC_SEQ_CST);
  g_client_page_named = true;
}

}  // namespace

void CustomHeaps::StartSession(Client* client, droidheap_report_fn report) {
  pthread_mutex_lock(&g_mutex);
  g_session = client;
  g_report = report;
  const uint32_t seen = g_heap_count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < seen; ++i) Configure(g_heaps[i]);
  // The page first, the search after: a registry made meanwhile is found by one or the other.
  NameClientPage();
  droidheap_find_pages(DROIDHEAP_REGISTRY_PAGE, AttachFound, nullptr);
  pthread_mutex_unlock(&g_mutex);
}

void CustomHeaps::StopSession() {
  const uint32_t seen = g_heap_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < seen; ++i) __atomic_store_n(&g_heaps[i]->enabled, 0, __ATOMIC_RELEASE);
}

void CustomHeaps::ResetInChild() {
  pthread_mutex_init(&g_mutex, nullptr);
  g_session = nullptr;
}

void CustomHeaps::Attach(droidheap_registry* registry) {
  pthread_mutex_lock(&g_mutex);
  AttachLocked(registry);
  pthread_mutex_unlock(&g_mutex);
}

}  // namespace droidheap
