// Allocations from C++ code built -O2 -fomit-frame-pointer, for bench/unwind_agreement.py:
// operator new, std::string and std::vector growth, node containers, shared_ptr, allocations in a
// std::sort comparator and in a qsort callback, and at the bottom of a deep recursion; from the
// main thread and several std::threads.
//   cxx_allocs [ROUNDS]     default 30
#include <stdint.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#define NOINLINE __attribute__((noinline))
#define KEEP(x) __asm__ volatile("" : "+r"(x))

namespace {

constexpr int kThreads = 3;
constexpr int kRecursionDepth = 70;

void* volatile g_sink;

struct Node {
  explicit Node(int v) : value(v) {}
  int value;
  Node* next = nullptr;
  char payload[40] = {};
};

NOINLINE void NewAndDelete(int round) {
  Node* head = nullptr;
  for (int i = 0; i < 3 + round % 4; ++i) {
    Node* n = new Node(i);
    n->next = head;
    head = n;
  }
  int* array = new int[100 + round];
  array[0] = round;
  g_sink = array;
  delete[] array;
  while (head != nullptr) {
    Node* next = head->next;
    delete head;
    head = next;
  }
}

NOINLINE size_t GrowString(int round) {
  std::string s = "a string that does not fit the small buffer";
  for (int i = 0; i < 6; ++i) s += std::to_string(round * 1000 + i) + s.substr(0, 20);
  return s.size();
}

NOINLINE size_t GrowVector(int round) {
  std::vector<uint64_t> v;
  for (int i = 0; i < 200 + round; ++i) v.push_back(static_cast<uint64_t>(i) * 3);
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) names.emplace_back(40 + i, static_cast<char>('a' + i));
  return v.size() + names.size();
}

NOINLINE size_t Containers(int round) {
  std::map<int, std::string> m;
  for (int i = 0; i < 12; ++i) m.emplace(i * round, std::string(30 + i, 'x'));
  auto shared = std::make_shared<std::vector<int>>(50 + round, 1);
  std::unique_ptr<Node> owned(new Node(round));
  return m.size() + shared->size() + static_cast<size_t>(owned->value);
}

NOINLINE size_t SortWithAllocatingComparator(int round) {
  std::vector<int> values;
  for (int i = 0; i < 40; ++i) values.push_back((i * 7919 + round * 13) % 97);
  size_t allocations = 0;
  std::sort(values.begin(), values.end(), [&allocations](int a, int b) {
    if ((a & 15) == 0 && allocations < 20) {
      ++allocations;
      std::string key = std::to_string(a) + "-a-key-long-enough-for-the-heap-" + std::to_string(b);
      g_sink = reinterpret_cast<void*>(key.size());
      return a < b;
    }
    return a < b;
  });
  return allocations + static_cast<size_t>(values[0]);
}

extern "C" NOINLINE int QsortCallback(const void* a, const void* b) {
  int x = *static_cast<const int*>(a), y = *static_cast<const int*>(b);
  if ((x & 7) == 0) {
    std::vector<int>* v = new std::vector<int>(4, x);
    g_sink = v;
    delete v;
  }
  return (x > y) - (x < y);
}

NOINLINE void SortWithQsort(int round) {
  int values[20];
  for (int i = 0; i < 20; ++i) values[i] = (i * 31 + round) % 53;
  qsort(values, 20, sizeof(int), QsortCallback);
  g_sink = reinterpret_cast<void*>(static_cast<intptr_t>(values[0]));
}

// Recursion through templates of different frame shapes.
template <int kShape>
NOINLINE uint64_t Recurse(int level, uint64_t salt);

inline __attribute__((always_inline)) uint64_t Choose(int level, uint64_t salt) {
  if (level <= 0) {
    auto* bottom = new std::string(80 + salt % 50, 'z');
    uint64_t r = bottom->size();
    delete bottom;
    return r;
  }
  switch ((salt >> (level % 29)) % 3) {
    case 0:
      return Recurse<0>(level - 1, salt * 5 + 3);
    case 1:
      return Recurse<1>(level - 1, salt ^ 0x5bd1e995);
    default:
      return Recurse<2>(level - 1, salt + 11);
  }
}

template <int kShape>
NOINLINE uint64_t Recurse(int level, uint64_t salt) {
  if (kShape == 1) {
    volatile char buffer[200];
    buffer[0] = static_cast<char>(level);
    uint64_t a = salt * 7, b = salt >> 3;
    KEEP(a);
    KEEP(b);
    uint64_t r = Choose(level, salt);
    KEEP(r);
    return r + a + b + static_cast<uint64_t>(buffer[0]);
  }
  if (kShape == 2) {
    std::vector<int> local(3, level);  // a destructor to run after the call
    uint64_t r = Choose(level, salt);
    KEEP(r);
    return r + static_cast<uint64_t>(local[0]);
  }
  uint64_t r = Choose(level, salt);
  KEEP(r);
  return r + 1;
}

NOINLINE void Work(int rounds, int seed) {
  for (int round = 0; round < rounds; ++round) {
    int r = round + seed;
    NewAndDelete(r);
    size_t n = GrowString(r) + GrowVector(r) + Containers(r) + SortWithAllocatingComparator(r);
    KEEP(n);
    SortWithQsort(r);
    uint64_t deep = Recurse<0>(kRecursionDepth + round % 3, static_cast<uint64_t>(r) * 2654435761u);
    KEEP(deep);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 30;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(Work, rounds, 1000 * (i + 1));
  Work(rounds, 0);
  for (auto& t : threads) t.join();
  return 0;
}
