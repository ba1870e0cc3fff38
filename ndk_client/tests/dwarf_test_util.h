// Helpers shared by the CFI and expression tests: little-endian byte assembly for hand-written
// CFI and DWARF expressions, and a row lookup that must succeed.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <initializer_list>
#include <vector>

#include "tests/test_util.h"
#include "unwinder/dwarf_cfi.h"

namespace {

const droidheap::CfiSectionView kNone{};  // a section the file does not have

struct Bytes {
  std::vector<uint8_t> v;
  Bytes() = default;
  Bytes(std::initializer_list<uint8_t> bytes) : v(bytes) {}
  Bytes& op(std::initializer_list<uint8_t> bytes) {
    v.insert(v.end(), bytes);
    return *this;
  }
  Bytes& le(uint64_t x, int n) {
    for (int i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
    return *this;
  }
  Bytes& u8(uint64_t x) { return le(x, 1); }
  Bytes& u16(uint64_t x) { return le(x, 2); }
  Bytes& u32(uint64_t x) { return le(x, 4); }
  Bytes& u64(uint64_t x) { return le(x, 8); }
  Bytes& uleb(uint64_t x) {
    do {
      uint8_t byte = x & 0x7f;
      x >>= 7;
      v.push_back(byte | (x ? 0x80 : 0));
    } while (x);
    return *this;
  }
  Bytes& sleb(int64_t x) {
    for (;;) {
      uint8_t byte = x & 0x7f;
      x >>= 7;
      bool done = (x == 0 && !(byte & 0x40)) || (x == -1 && (byte & 0x40));
      v.push_back(byte | (done ? 0 : 0x80));
      if (done) return *this;
    }
  }
  Bytes& str(const char* s) {
    v.insert(v.end(), s, s + strlen(s) + 1);
    return *this;
  }
  Bytes& add(const Bytes& o) {
    v.insert(v.end(), o.v.begin(), o.v.end());
    return *this;
  }
  Bytes& block(const Bytes& o) { return uleb(o.v.size()).add(o); }
  size_t size() const { return v.size(); }
  void put(size_t pos, uint64_t x, int n) {
    for (int i = 0; i < n; ++i) v[pos + i] = static_cast<uint8_t>(x >> (8 * i));
  }
};

inline droidheap::CfiRow Row(const droidheap::CfiTable& table, uint64_t pc) {
  droidheap::CfiRow row;
  if (!table.FindRow(pc, &row)) {
    fprintf(stderr, "no row for pc %#llx\n", static_cast<unsigned long long>(pc));
    CHECK(false);
  }
  return row;
}

}  // namespace
