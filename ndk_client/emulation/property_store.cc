#include "emulation/property_store.h"

#include <stdlib.h>
#include <string.h>

#include "common/small_file.h"

namespace droidheap {

const char* DeviceRoot() {
  const char* root = getenv("DROIDHEAP_DEVICE_ROOT");
  return (root != nullptr && root[0] == '/') ? root : nullptr;
}

bool GetProperty(const char* key, char* value, size_t value_size) {
  const char* root = DeviceRoot();
  if (root == nullptr || value_size == 0) return false;
  char path[4096];
  size_t root_len = strlen(root);
  static const char kName[] = "/properties";
  if (root_len + sizeof(kName) > sizeof(path)) return false;
  memcpy(path, root, root_len);
  memcpy(path + root_len, kName, sizeof(kName));

  // The store is small (a few dozen properties); 64 KiB is ample and keeps this heap-free.
  static constexpr size_t kMaxStore = 64 * 1024;
  char buf[kMaxStore];
  const ssize_t read_bytes = ReadSmallFile(path, buf, sizeof(buf));
  if (read_bytes < 0) return false;
  const size_t len = static_cast<size_t>(read_bytes);

  size_t key_len = strlen(key);
  for (size_t line = 0; line < len;) {
    size_t end = line;
    while (end < len && buf[end] != '\n') ++end;
    if (end - line > key_len && memcmp(buf + line, key, key_len) == 0 && buf[line + key_len] == '=') {
      size_t value_len = end - (line + key_len + 1);
      if (value_len == 0 || value_len >= value_size) return false;
      memcpy(value, buf + line + key_len + 1, value_len);
      value[value_len] = '\0';
      return true;
    }
    line = end + 1;
  }
  return false;
}

}  // namespace droidheap
