#include "unwinder/process_maps.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace droidheap {
namespace {

std::atomic<uint64_t> g_generations{0};  // every ProcessMaps' generations, from 1

// /proc/PID/maps read by path: under qemu-user, another process's maps are the kernel's.
std::string ReadHostView(int pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/maps", pid);
  std::string text;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(fd);
  return text;
}

}  // namespace

std::vector<MapEntry> ProcessMaps::ParseLines(const std::string& text) {
  std::vector<MapEntry> entries;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;

    MapEntry e;
    char perms[8] = {};
    int path_start = 0;
    if (sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n",
               &e.start, &e.end, perms, &e.offset, &e.file.dev_major, &e.file.dev_minor, &e.file.inode,
               &path_start) < 7 ||
        e.end <= e.start) {
      continue;
    }
    e.executable = strchr(perms, 'x') != nullptr;
    e.readable = perms[0] == 'r';
    e.writable = perms[0] != '\0' && perms[1] == 'w';
    e.shared = e.writable && perms[2] != '\0' && perms[3] == 's';
    if (path_start > 0 && static_cast<size_t>(path_start) <= line.size()) {
      e.path = line.substr(static_cast<size_t>(path_start));
    }
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const MapEntry& a, const MapEntry& b) { return a.start < b.start; });
  return entries;
}

void ProcessMaps::Parse(const std::string& text) {
  page_hits_.fill(PageHit{});
  generation_ = g_generations.fetch_add(1, std::memory_order_relaxed) + 1;
  entries_ = ParseLines(text);
}

void ProcessMaps::AddMissing(const std::string& host_text) {
  std::vector<MapEntry> added;
  for (MapEntry& e : ParseLines(host_text)) {
    if (e.path.empty() || e.path[0] != '/') continue;
    auto next = std::lower_bound(entries_.begin(), entries_.end(), e.end,
                                 [](const MapEntry& m, uint64_t end) { return m.start < end; });
    const bool overlaps = next != entries_.begin() && std::prev(next)->end > e.start;
    if (overlaps) continue;
    e.permissions_known = false;
    added.push_back(std::move(e));
  }
  if (added.empty()) return;
  for (MapEntry& e : added) entries_.push_back(std::move(e));
  std::sort(entries_.begin(), entries_.end(),
            [](const MapEntry& a, const MapEntry& b) { return a.start < b.start; });
  page_hits_.fill(PageHit{});
  generation_ = g_generations.fetch_add(1, std::memory_order_relaxed) + 1;
}

bool ProcessMaps::Reload(int fd) {
  std::string text;
  char buf[65536];
  for (off_t offset = 0;;) {
    ssize_t n = pread(fd, buf, sizeof(buf), offset);
    if (n < 0) return false;
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    offset += n;
  }
  // A process that has exited reads as empty: what was known of it still holds for its records.
  if (text.empty()) return false;
  Parse(text);
  if (host_view_pid_ > 0) AddMissing(ReadHostView(host_view_pid_));
  return true;
}

void ProcessMaps::TakeTables(MapEntry* entry, ElfCache* elf_cache) {
  if (!entry->has_tables || entry->tables_generation == elf_cache->generation()) return;
  entry->tables_generation = elf_cache->generation();
  entry->cfi = elf_cache->Cfi(entry->path, entry->file, entry->offset);
  entry->exidx = elf_cache->Exidx(entry->path, entry->file, entry->offset);
}

const MapEntry* ProcessMaps::Find(uint64_t pc, ElfCache* elf_cache) {
  const uint64_t page = pc >> 12;
  PageHit& hit = page_hits_[static_cast<size_t>((page * 0x9e3779b97f4a7c15ull) >>
                                                (64 - kPageHitsLog2))];
  if (hit.page == page) {
    const MapEntry& e = entries_[hit.index];
    if (pc >= e.start && pc < e.end && e.resolved) {
      TakeTables(&entries_[hit.index], elf_cache);
      return &e;
    }
    // else a mapping not page-aligned, or one whose file is still to be read
  }
  auto it = std::upper_bound(entries_.begin(), entries_.end(), pc,
                             [](uint64_t value, const MapEntry& e) { return value < e.start; });
  if (it == entries_.begin()) return nullptr;
  --it;
  if (pc >= it->end) return nullptr;
  if (!it->resolved) {
    it->resolved = true;
    if (!it->path.empty() && it->path[0] == '/') {
      const ElfInfo& elf = elf_cache->Get(it->path, it->file, it->offset);
      if (elf.put_off) it->resolved = false;  // resolved by a later unwind
      if (elf.valid) {
        it->build_id = elf.build_id;
        it->elf = elf.location;
        const uint64_t elf_offset = it->offset - elf.location.offset;
        const bool has_code = elf.HasCodeIn(elf_offset, it->end - it->start);
        if (!it->permissions_known) it->executable = has_code;
        it->load_bias = elf.LoadBiasAt(elf_offset, it->executable);
        // Unwind tables wherever the file has code, whatever the permissions say: qemu-user shows
        // a 32-bit guest's library whose read-only segment and code the kernel merged (qemu maps
        // code without PROT_EXEC) as one r--p mapping, in which every one of its pcs lies. On a
        // phone no pc is found in a mapping that is not executable, so nothing changes there.
        it->has_tables = it->executable || has_code;
      }
    }
  }
  TakeTables(&*it, elf_cache);
  hit = {page, static_cast<uint32_t>(it - entries_.begin())};
  return &*it;
}

}  // namespace droidheap
