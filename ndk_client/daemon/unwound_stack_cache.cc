#include "daemon/unwound_stack_cache.h"

namespace droidheap {

UnwoundStackCache::Entry* UnwoundStackCache::SetOf(uint64_t pc, uint64_t sp, uint64_t stack_top) {
  const uint64_t mixed = (pc * 0x9e3779b97f4a7c15ull) ^ (sp * 0xc2b2ae3d27d4eb4full) ^ stack_top;
  const size_t sets = entries_.size() / kWays;  // a power of two
  return &entries_[static_cast<size_t>((mixed ^ (mixed >> 29)) & (sets - 1)) * kWays];
}

UnwoundStackCache::Entry* UnwoundStackCache::Find(const RegisterLayout& layout,
                                                  const uint64_t* regs, uint64_t stack_top,
                                                  const StackMemory& memory,
                                                  uint64_t maps_generation) {
  if (entries_.empty()) return nullptr;
  const uint64_t pc = regs[layout.pc];
  const uint64_t sp = regs[layout.sp];
  Entry* set = SetOf(pc, sp, stack_top);
  for (size_t way = 0; way < kWays; ++way) {
    Entry& entry = set[way];
    if (!entry.used || entry.maps_generation != maps_generation || entry.pc != pc ||
        entry.sp != sp || entry.stack_top != stack_top) {
      continue;
    }
    bool same = true;
    for (size_t i = 0; same && i < entry.register_count; ++i) {
      same = regs[entry.register_numbers[i]] == entry.register_values[i];
    }
    for (size_t i = 0; same && i < entry.words.size(); ++i) {
      uint64_t value;
      same = memory.ReadWord(entry.words[i].address, layout.word_size, &value) &&
             value == entry.words[i].value;
    }
    if (same) {
      entry.last_used = ++clock_;
      ++hits_;
      return &entry;
    }
  }
  return nullptr;
}

UnwoundStackCache::Entry* UnwoundStackCache::Keep(const RegisterLayout& layout,
                                                  const uint64_t* regs, uint64_t stack_top,
                                                  uint64_t maps_generation,
                                                  const UnwindInputs& inputs) {
  if (!inputs.complete) return nullptr;
  uint8_t numbers[kMaxInputRegisters];
  size_t count = 0;
  for (uint32_t reg = 0; reg < static_cast<uint32_t>(kMaxRegisters); ++reg) {
    if ((inputs.registers >> reg & 1) == 0) continue;
    if (count == kMaxInputRegisters) return nullptr;
    numbers[count++] = static_cast<uint8_t>(reg);
  }
  if (entries_.empty()) entries_.resize(kMinSets * kWays);
  const uint64_t pc = regs[layout.pc];
  const uint64_t sp = regs[layout.sp];
  Entry* set = SetOf(pc, sp, stack_top);
  Entry* victim = FreeEntry(set, maps_generation);
  if (victim == nullptr && entries_.size() < kMaxSets * kWays) {
    // A set full of current entries: more call paths than room. Grown, the cache starts over.
    const size_t grown = entries_.size() * 4;
    entries_.clear();
    entries_.resize(grown);
    set = SetOf(pc, sp, stack_top);
    victim = set;
  }
  if (victim == nullptr) {
    // At its largest: the least recently used entry goes.
    victim = set;
    for (size_t way = 1; way < kWays; ++way) {
      if (set[way].last_used < victim->last_used) victim = &set[way];
    }
  }
  victim->used = true;
  victim->maps_generation = maps_generation;
  victim->pc = pc;
  victim->sp = sp;
  victim->stack_top = stack_top;
  victim->register_count = static_cast<uint8_t>(count);
  for (size_t i = 0; i < count; ++i) {
    victim->register_numbers[i] = numbers[i];
    victim->register_values[i] = regs[numbers[i]];
  }
  victim->words.clear();
  for (uint32_t index : inputs.used_words) {
    // An index past the words read is one the last step was to read and never did: it ended
    // before (a frame pointer off the stack, an undefined return address), on what it had used.
    if (index < inputs.words.size()) victim->words.push_back(inputs.words[index]);
  }
  victim->last_used = ++clock_;
  victim->callstack = 0;
  victim->error = UnwindError::kNone;
  victim->logged_pcs.clear();
  victim->published = kNotPublished;
  return victim;
}

UnwoundStackCache::Entry* UnwoundStackCache::FreeEntry(Entry* set, uint64_t maps_generation) {
  // An entry of older maps is as good as empty.
  for (size_t way = 0; way < kWays; ++way) {
    if (!set[way].used || set[way].maps_generation != maps_generation) return &set[way];
  }
  return nullptr;
}

size_t UnwoundStackCache::memory_bytes() const {
  size_t bytes = entries_.capacity() * sizeof(Entry);
  for (const Entry& entry : entries_) {
    bytes += entry.words.capacity() * sizeof(WordRead) +
             entry.logged_pcs.capacity() * sizeof(uint64_t);
  }
  return bytes;
}

}  // namespace droidheap
