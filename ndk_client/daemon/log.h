// droidheapd's log: one line per call on standard error, "droidheapd: " first. The host reads
// these lines (droidheap/session.py), so a line is written whole, whatever thread writes it.
#pragma once

namespace droidheap {

void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace droidheap
