// Read-only view of the emulated device's property store: the file <device root>/properties,
// "key=value" lines, replaced atomically by the host. Used by the emulation layer only, at libc
// init and from the client-loading thread; it does not use the heap (it may run before the
// allocator is usable by the program).
#pragma once

#include <stddef.h>

namespace droidheap {

// The emulated device's root directory (from DROIDHEAP_DEVICE_ROOT), or nullptr.
const char* DeviceRoot();

// Copies the value of `key` into `value` (NUL-terminated). False when the key is absent or empty.
bool GetProperty(const char* key, char* value, size_t value_size);

}  // namespace droidheap
