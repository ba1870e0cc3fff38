"""Stacks through code without frame pointers (libc, libstdc++, an optimized program) are unwound
with call-frame information: every byte lands on the site that caused it, in the trace and in the
pprof files, on every ABI."""
import re
import shutil
import subprocess

import pytest

from tests.e2e.conftest import Cli, compiler
from tests.e2e.expected_sites import libc_sites
from tests.e2e.test_profile import single_process
from tests.e2e.trace_check import (assert_trace_processor_agrees, function_frames, read_dumps,
                                   totals_by_leaf_function)


@pytest.fixture(scope="module")
def libc_profile(abi, programs, tmp_path_factory):
    """One profile of libc_sites per ABI, shared by the checks below."""
    program = programs("libc_sites")
    work = tmp_path_factory.mktemp(f"libc_sites-{abi}")
    out = work / "out"
    result = Cli(work / "device", abi).run("--local", "-o", out, "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    return program, out


def test_sites_behind_libc_and_libstdcxx_get_their_exact_bytes(libc_profile):
    program, out = libc_profile
    per_site = single_process(totals_by_leaf_function(out / "raw-trace", program, prefix="site_"))
    for name, site in libc_sites().items():
        got = per_site.get(name)
        assert got is not None, f"{name} missing: {sorted(per_site)}"
        assert (got.allocated, got.in_use, got.alloc_count) == (
            site.allocated, site.in_use, site.objects), (name, got)
    qsort = per_site["site_qsort_callback"]  # one 64-byte block per comparison, each freed
    assert qsort.alloc_count > 0 and qsort.allocated == 64 * qsort.alloc_count and qsort.in_use == 0
    assert_trace_processor_agrees(out, program)


def test_no_stack_ends_in_an_unwind_error_and_deep_ones_are_whole(libc_profile):
    program, out = libc_profile
    stacks = single_process(function_frames(out / "raw-trace", program))
    assert not [s for s in stacks if any(f.startswith("[droidheap") for f in s)]
    deepest = max(s.count("site_deep_recursion") for s in stacks)
    assert deepest == 81  # depths 80 .. 0
    for stack in stacks:  # every stack goes down to main, through whatever libraries
        assert "main" in stack, stack


@pytest.mark.skipif(shutil.which("go") is None, reason="go (golang-go) is not installed")
def test_pprof_names_the_caller_behind_libc(libc_profile):
    _, out = libc_profile
    (profile,) = out.glob("heap_dump.*.pb.gz")
    traces = subprocess.run(["go", "tool", "pprof", "-traces", "-sample_index=alloc_space",
                             str(profile)], capture_output=True, text=True, timeout=120)
    assert traces.returncode == 0, traces.stderr
    blocks = traces.stdout.split("-----------+")
    # Each block is one stack, leaf first: the libc function, then the site that called it.
    functions = [re.findall(r"^[ \t]+(?:\S+[ \t]+)?(\S+)[ \t]*$", b, re.M) for b in blocks]
    assert any(f[:2] == ["strdup", "site_strdup"] or f[:2] == ["__strdup", "site_strdup"]
               for f in functions if len(f) >= 2), traces.stdout[:3000]
    assert any("site_std_string" in f for f in functions)
    assert any("site_qsort_callback" in f for f in functions)


def test_signal_frames_are_unwound_in_a_process_gone_before_its_records(cli, programs, tmp_path):
    program = programs("signal_site")
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", program)
    assert result.returncode == 0, result.stderr
    per_site = single_process(totals_by_leaf_function(out / "raw-trace", program, prefix="site_"))
    handler = per_site.get("site_signal_handler")
    assert handler is not None and (handler.allocated, handler.alloc_count) == (7770, 10), per_site
    stacks = single_process(function_frames(out / "raw-trace", program))
    for stack in (s for s in stacks if "site_signal_handler" in s):
        below = stack[stack.index("site_signal_handler"):]
        assert "site_raise" in below and "main" in below, stack
    assert_trace_processor_agrees(out, program)


# A library the program loads mid-session: a site in it and a site called back from it.
PLUGIN_C = r"""
#include <stdlib.h>
void* volatile g_plugin_sink;
__attribute__((noinline)) void plugin_allocate(void (*call_back)(void)) {
  for (int i = 0; i < 100; i++) g_plugin_sink = malloc(6000);
  call_back();
  __asm__ volatile("" ::: "memory");  /* keeps the call a call: this frame stays on the stack */
}
"""
LOADS_PLUGIN_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static void* volatile g_sink;
__attribute__((noinline)) static void before_load(void) {
  for (int i = 0; i < 100; i++) g_sink = malloc(1000);
}
__attribute__((noinline)) static void called_back(void) {
  for (int i = 0; i < 100; i++) g_sink = malloc(3000);
}
int main(int argc, char** argv) {
  before_load();
  void* plugin = argc == 2 ? dlopen(argv[1], RTLD_NOW) : NULL;
  typedef void (*Allocate)(void (*)(void));
  Allocate allocate = plugin ? (Allocate)dlsym(plugin, "plugin_allocate") : NULL;
  if (allocate == NULL) {
    fprintf(stderr, "cannot load the plugin: %s\n", dlerror());
    return 1;
  }
  allocate(called_back);
  printf("plugin done\n");
  return 0;
}
"""


def test_a_library_loaded_mid_session_is_unwound_through(cli, abi, tmp_path):
    """The maps the daemon read at connection lack a library dlopened later: the first sample in it
    makes the daemon read them again, and both a site in it and one called back from it (a
    stack that passes through it, built without frame pointers) come out exact at -i 1."""
    (tmp_path / "plugin.c").write_text(PLUGIN_C)
    (tmp_path / "loads_plugin.c").write_text(LOADS_PLUGIN_C)
    plugin, program = tmp_path / "libplugin.so", tmp_path / "loads_plugin"
    subprocess.run([compiler(abi), "-O2", "-fomit-frame-pointer", "-g", "-shared", "-fPIC",
                    str(tmp_path / "plugin.c"), "-o", str(plugin)], check=True)
    subprocess.run([compiler(abi), "-O1", "-g", str(tmp_path / "loads_plugin.c"), "-o",
                    str(program), "-ldl"], check=True)
    out = tmp_path / "out"
    result = cli.run("--local", "-o", out, "-i", "1", "--", program, plugin)
    assert result.returncode == 0, result.stderr
    assert "plugin done" in result.stdout
    in_plugin = next(iter(totals_by_leaf_function(out / "raw-trace", plugin).values()))
    # Its own site and the call back's: both stacks' innermost frame in the plugin.
    assert in_plugin["plugin_allocate"].allocated == 100 * 6000 + 100 * 3000
    in_program = next(iter(totals_by_leaf_function(out / "raw-trace", program).values()))
    assert in_program["before_load"].allocated == 100 * 1000
    assert in_program["called_back"].allocated == 100 * 3000
    # The call back's stack goes on through the plugin to main.
    (dumps,) = read_dumps(out / "raw-trace").values()
    called_back_paths = [[path for path, _ in stack] for stack, sample in dumps[-1]
                         if sample.self_allocated == 100 * 3000]
    assert any(any(p.endswith("/" + plugin.name) for p in paths)
               and sum(p.endswith("/" + program.name) for p in paths) >= 2
               for paths in called_back_paths), called_back_paths
