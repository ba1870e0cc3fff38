"""What tests/programs/alloc_sites.c allocates, per site function (bytes, objects, bytes kept)."""
import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Site:
    allocated: int
    objects: int
    in_use: int
    size: int  # bytes per allocation


def sites(threads: int = 4):
    return {
        "site_leak_malloc": Site(4096 * 1024, 4096, 4096 * 1024, 1024),
        "site_churn_malloc_free": Site(4096 * 2048, 4096, 0, 2048),
        "site_small_for_realloc": Site(256 * 100, 256, 0, 100),
        "site_grow_realloc": Site(256 * 16384, 256, 256 * 16384, 16384),
        "site_posix_memalign": Site(512 * 4096, 512, 512 * 4096, 4096),
        "site_aligned_alloc": Site(512 * 4096, 512, 512 * 4096, 4096),
        "site_thread_calloc": Site(threads * 1024 * 2048, threads * 1024, threads * 1024 * 2048,
                                   2048),
    }


def libc_sites(libcxx: bool = False):
    """tests/programs/libc_sites.cc: sites whose bytes pass through libc or libstdc++ (x86_64 and
    aarch64 LP64: a std::string object is 32 bytes, a std::vector 24). With `libcxx`, as built
    for Android against LLVM's libc++ (LP64): a std::string object is 24 bytes and its 201 bytes
    come as 208 (libc++ rounds a string's buffer up to 16 bytes)."""
    vector_growth = sum(4 << i for i in range(17))  # capacities 1, 2, 4, ... 65536 ints
    string_object, string_buffer = (24, 208) if libcxx else (32, 201)
    string_site = Site(1000 * (string_object + string_buffer), 2000,
                       1000 * (string_object + string_buffer), string_buffer)
    return {
        "site_strdup": Site(1000 * 301, 1000, 1000 * 301, 301),
        "site_operator_new": Site(1000 * 512, 1000, 1000 * 512, 512),
        "site_std_string": string_site,
        "site_vector_growth": Site(24 + vector_growth, 18, 24 + (4 << 16), 4 << 16),
        "site_deep_recursion": Site(100 * 4096, 100, 100 * 4096, 4096),
    }


def sampling_bound(site: Site, interval: int, sigmas: float = 5.0) -> float:
    """Largest expected deviation of a sampled byte total from the truth.

    Allocations at least as large as the interval are always recorded exactly; smaller ones catch
    a Poisson number of sample points (mean total/interval) worth `interval` bytes each.
    """
    if interval <= 1 or site.size >= interval:
        return 0.0
    return sigmas * math.sqrt(site.allocated * interval) + interval
