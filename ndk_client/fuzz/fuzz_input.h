// Reads a fuzzer's input as a sequence of small fields; past its end every field reads as zero,
// so that any input, however short, is a valid (if dull) case.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace droidheap {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T Take() {
    T value{};
    const size_t n = sizeof(T) < remaining() ? sizeof(T) : remaining();
    if (n > 0) memcpy(&value, data_ + at_, n);
    at_ += n;
    return value;
  }
  // Up to `size` bytes, in place; *got says how many there were.
  const uint8_t* TakeBytes(size_t size, size_t* got) {
    *got = size < remaining() ? size : remaining();
    const uint8_t* bytes = data_ + at_;
    at_ += *got;
    return bytes;
  }
  size_t remaining() const { return size_ - at_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace droidheap
