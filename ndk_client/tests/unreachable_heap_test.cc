// UnreachableHeap: each sweep's verdict replaces the last one's in figures that only grow (what
// Perfetto's trace processor takes differences of), each stack under the root frame.
#include "daemon/unreachable_heap.h"
#include "tests/test_util.h"

using droidheap::CallstackSample;
using droidheap::CallstackTable;
using droidheap::FrameInfo;
using droidheap::UnreachableHeap;
using droidheap::UnreachableSample;

namespace {

CallstackSample Totals(const UnreachableHeap& heap, uint32_t rooted) {
  for (const CallstackSample& s : heap.Snapshot()) {
    if (s.callstack == rooted) return s;
  }
  return {};
}

void TestStacksAreBookedUnderTheRootFrame() {
  CallstackTable table;
  const uint32_t mapping = table.InternMapping({});
  const uint32_t a = table.InternCallstack({{mapping, 0x10}, {mapping, 0x20}});
  UnreachableHeap heap;
  CHECK(heap.empty());
  heap.Book({{a, 64, 2}}, &table);
  CHECK(!heap.empty() && heap.Snapshot().size() == 1);
  const std::vector<FrameInfo>& rooted = table.callstacks()[heap.Snapshot()[0].callstack];
  CHECK(rooted.size() == 3 && rooted[1].rel_pc == 0x10 && rooted[2].rel_pc == 0x20);
  CHECK(table.mappings()[rooted[0].mapping].path == droidheap::kUnreachableRootName);
  // The same stack again is the same rooted stack.
  heap.Book({{a, 64, 2}}, &table);
  CHECK(heap.Snapshot().size() == 1);
}

void TestEachVerdictReplacesTheLastInFiguresThatOnlyGrow() {
  CallstackTable table;
  const uint32_t a = table.InternCallstack({{0, 0x10}});
  const uint32_t b = table.InternCallstack({{0, 0x20}});
  UnreachableHeap heap;
  heap.Book({{a, 64, 2}}, &table);
  const uint32_t rooted_a = heap.Snapshot()[0].callstack;
  heap.Book({{b, 32, 1}, {a, 16, 1}}, &table);  // a: 64 -> 16; b new
  const uint32_t rooted_b = heap.Snapshot()[1].callstack;
  CallstackSample sa = Totals(heap, rooted_a);
  CHECK(sa.self_allocated == 64 && sa.self_freed == 48 && sa.alloc_count == 2 &&
        sa.free_count == 1);
  CHECK(sa.peak_bytes == 16 && sa.peak_count == 1);
  heap.Book({}, &table);  // nothing unreachable any more
  sa = Totals(heap, rooted_a);
  const CallstackSample sb = Totals(heap, rooted_b);
  CHECK(sa.self_allocated - sa.self_freed == 0 && sb.self_allocated == 32 && sb.self_freed == 32);
  CHECK(sa.peak_bytes == 0 && sb.peak_count == 0);
  heap.Book({{a, 100, 3}}, &table);  // and again
  sa = Totals(heap, rooted_a);
  CHECK(sa.self_allocated == 164 && sa.self_allocated - sa.self_freed == 100);
  CHECK(sa.alloc_count - sa.free_count == 3);
}

// Two of a sweep's samples of one stack (two heaps' slots of it) add up.
void TestSamplesOfOneStackAddUp() {
  CallstackTable table;
  const uint32_t a = table.InternCallstack({{0, 0x10}});
  UnreachableHeap heap;
  heap.Book({{a, 64, 2}, {a, 32, 1}}, &table);
  const CallstackSample s = heap.Snapshot()[0];
  CHECK(heap.Snapshot().size() == 1 && s.self_allocated == 96 && s.alloc_count == 3);
}

}  // namespace

int main() {
  TestStacksAreBookedUnderTheRootFrame();
  TestEachVerdictReplacesTheLastInFiguresThatOnlyGrow();
  TestSamplesOfOneStackAddUp();
  printf("unreachable_heap_test: ok\n");
  return 0;
}
