"""Reading droidheap's Perfetto traces: packet framing (reader), heap dumps rebuilt from interned
state (heap_dumps), and the symbolized copy written next to the raw trace (symbolized)."""
