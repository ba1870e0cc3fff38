// droidheap/heaps.h, the custom heaps' API, on its own: how a registry and the client's page find
// each other through /proc/self/maps, what a registration leaves for the client, and that a
// report reaches the client's entry only while the heap is enabled.
#include "droidheap/heaps.h"

#include <string.h>

#include "tests/test_util.h"

namespace {

int g_attached = 0;
droidheap_registry* g_attached_registry = nullptr;

void FakeAttach(droidheap_registry* registry) {
  ++g_attached;
  g_attached_registry = registry;
}

struct Report {
  droidheap_heap* heap;
  uint32_t event;
  uint64_t address;
  uint64_t size;
} g_last;
int g_reports = 0;

void FakeReport(droidheap_heap* heap, uint32_t event, uint64_t address, uint64_t size) {
  ++g_reports;
  g_last = {heap, event, address, size};
}

int CountPage(void* page, void* count) {
  *static_cast<void**>(count) = page;
  return 0;
}

void* FindPage(const char* name) {
  void* found = nullptr;
  droidheap_find_pages(name, CountPage, &found);
  return found;
}

// A client already loaded: the registry made after it finds its page and calls it back.
void TestARegistryMadeAfterTheClientFindsItsPage() {
  CHECK(FindPage(DROIDHEAP_CLIENT_PAGE) == nullptr);
  auto* page = static_cast<droidheap_client_page*>(droidheap_named_page(DROIDHEAP_CLIENT_PAGE));
  CHECK(page != nullptr);
  page->version = DROIDHEAP_HEAPS_VERSION;
  page->attach = reinterpret_cast<uintptr_t>(&FakeAttach);
  page->magic = DROIDHEAP_CLIENT_MAGIC;
  CHECK(FindPage(DROIDHEAP_CLIENT_PAGE) == page);

  droidheap_heap* pool = droidheap_register_heap("pool");
  CHECK(g_attached == 1 && g_attached_registry != nullptr);
  CHECK(&g_attached_registry->heaps[0] == pool);
  CHECK(pool->ready == 1 && strcmp(pool->name, "pool") == 0 && pool->enabled == 0);
  // The registry is there for a client that comes later.
  CHECK(FindPage(DROIDHEAP_REGISTRY_PAGE) == g_attached_registry);
  CHECK(g_attached_registry->magic == DROIDHEAP_REGISTRY_MAGIC);
}

void TestReportsReachTheClientOnlyWhileEnabled() {
  droidheap_heap* arena = droidheap_register_heap("arena");
  int block;
  droidheap_report_alloc(arena, &block, 16);
  CHECK(g_reports == 0);
  arena->report = reinterpret_cast<uintptr_t>(&FakeReport);
  arena->enabled = 1;
  droidheap_report_alloc(arena, &block, 16);
  CHECK(g_reports == 1 && g_last.heap == arena && g_last.event == DROIDHEAP_EVENT_ALLOC);
  CHECK(g_last.address == reinterpret_cast<uintptr_t>(&block) && g_last.size == 16);
  droidheap_report_free(arena, &block, 16);
  CHECK(g_reports == 2 && g_last.event == DROIDHEAP_EVENT_FREE);
  arena->enabled = 0;
  droidheap_report_free(arena, &block, 16);
  CHECK(g_reports == 2);
}

void TestLongNamesAreCutAndAFullRegistryReportsNowhere() {
  char name[100];
  memset(name, 'n', sizeof(name) - 1);
  name[sizeof(name) - 1] = '\0';
  droidheap_heap* heap = droidheap_register_heap(name);
  CHECK(strlen(heap->name) == DROIDHEAP_HEAP_NAME_SIZE - 1);
  droidheap_heap* last = heap;
  for (int i = 3; i < DROIDHEAP_REGISTRY_HEAPS; ++i) last = droidheap_register_heap("more");
  CHECK(last == &g_attached_registry->heaps[DROIDHEAP_REGISTRY_HEAPS - 1]);
  droidheap_heap* nowhere = droidheap_register_heap("one too many");
  CHECK(nowhere->ready == 0);
  droidheap_report_alloc(nowhere, name, 1);  // harmless
  CHECK(g_attached == DROIDHEAP_REGISTRY_HEAPS);  // every registration that took a slot
}

}  // namespace

int main() {
  TestARegistryMadeAfterTheClientFindsItsPage();
  TestReportsReachTheClientOnlyWhileEnabled();
  TestLongNamesAreCutAndAFullRegistryReportsNowhere();
  printf("heaps_header_test: ok\n");
  return 0;
}
