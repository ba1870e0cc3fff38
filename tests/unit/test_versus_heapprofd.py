"""bench/versus_heapprofd.py's parts that need no device (bench/versus_figures.py): reading the
programs' output, /proc and traces, the per-site error, the losses, the goals and the table."""
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from tests import bench_scripts
from tests.e2e.expected_sites import Site, sites
from tests.trace_processor import SiteTotals


@pytest.fixture(scope="module")
def vs():
    return bench_scripts.load("versus_figures")


def test_the_benchmark_command_loads_and_explains_itself():
    text = bench_scripts.help_text("versus_heapprofd.py")
    assert "--runs" in text and "heapprofd" in text


def test_reads_malloc_churns_own_time_and_allocations(vs):
    output = ("1000 elapsed_ns=123456789 allocations=40000\n1001 VmHWM:\t 23592 kB\n"
              "start_ns=900\n")
    assert vs.parse_program_output(output) == (123456789, 40000)


def test_times_alloc_sites_from_its_start_to_its_done_line(vs):
    output = "1795649900316445159 done\nstart_ns=1795649899671559909\n"
    assert vs.parse_program_output(output) == (644885250, None)


def test_a_program_that_printed_neither_is_an_error(vs):
    with pytest.raises(RuntimeError, match="neither"):
        vs.parse_program_output("start_ns=1\n")


def test_cpu_ticks_are_utime_and_stime_even_with_a_name_holding_spaces(vs):
    stat = ("301 (heap prof) d) R 0 0 0 0 -1 4194560 207429 0 1 0 4584 1153 0 0 20 0 8 0 "
            "3068757 889753600 10003")
    assert vs.parse_cpu_ticks(stat) == 4584 + 1153


def test_reads_vmhwm(vs):
    assert vs.parse_vmhwm_kib("VmPeak:\t 1 kB\nVmHWM:\t   40976 kB\nVmRSS:\t 2 kB\n") == 40976
    with pytest.raises(RuntimeError):
        vs.parse_vmhwm_kib("VmRSS:\t 2 kB\n")


def _trace(*dumps) -> bytes:
    """A trace of one profile packet per (pid, heap_samples, errors, overran) dump."""
    trace = pb.Trace()
    for pid, samples, errors, overran in dumps:
        process = trace.packet.add().profile_packet.process_dumps.add(pid=pid)
        process.stats.heap_samples = samples
        process.stats.unwinding_errors = errors
        process.buffer_overran = overran
    return trace.SerializeToString()


def test_summary_is_the_busiest_process_with_its_last_stats_and_any_dumps_flags(vs):
    summary = vs.summarize_trace(_trace((7, 10, 0, True), (7, 40004, 3, False), (8, 5, 0, False)))
    assert (summary.pid, summary.heap_samples, summary.unwinding_errors) == (7, 40004, 3)
    assert summary.flags == ("buffer overran",)


def test_a_trace_without_dumps_is_a_missing_profile(vs):
    run = vs.Run(1, trace=vs.summarize_trace(b""))
    assert run.losses(4096) == ["profile missing"]


def test_fewer_samples_than_allocations_at_interval_1_is_a_loss_only_there(vs):
    run = vs.Run(1, allocations=40000, trace=vs.TraceSummary(7, heap_samples=39000))
    assert run.losses(1) == ["1000 of 40000 allocations never sampled"]
    assert run.losses(4096) == []
    assert vs.Run(1, allocations=40000, trace=vs.TraceSummary(7, 40004)).losses(1) == []


def test_site_error_is_relative_to_the_exact_bytes_over_booked_sites_only(vs):
    exact = {"site_a": Site(1000, 10, 0, 100), "site_b": Site(2000, 1, 0, 2000),
             "site_c": Site(500, 5, 0, 100)}
    booked = {"site_a": SiteTotals(allocated=900), "site_b": SiteTotals(allocated=2000),
              "site_c": SiteTotals(allocated=0), "?": SiteTotals(allocated=4096)}
    accuracy = vs.site_accuracy(booked, exact, 1)
    assert accuracy.errors == {"site_a": pytest.approx(-0.1), "site_b": 0.0}
    assert accuracy.missing == ["site_c"]
    assert accuracy.unattributed == 4096
    assert accuracy.beyond_sampling == ["site_a"]  # every allocation sampled: exact or wrong
    assert vs.site_accuracy({}, exact, 1).errors == {}


def test_a_sampled_sites_error_within_what_sampling_explains_is_not_beyond_it(vs):
    site = Site(25600, 256, 0, 100)  # 100-byte blocks, some 6 samples at 4096
    assert vs.site_accuracy({"s": SiteTotals(allocated=16384)}, {"s": site},
                            4096).beyond_sampling == []
    assert vs.site_accuracy({"s": SiteTotals(allocated=25600 * 4)}, {"s": site},
                            4096).beyond_sampling == ["s"]


def _cell(vs, base, dh, hp, dh_rss=30000, hp_rss=40000, hp_missing=(), dh_error=0.0):
    exact = sites(4)
    booked = {name: SiteTotals(allocated=site.allocated) for name, site in exact.items()
              if name not in hp_missing}

    def run(ms, rss, booked_sites):
        return vs.Run(int(ms * 1e6), trace=vs.TraceSummary(1, 100),
                      accuracy=vs.site_accuracy(booked_sites, exact, 4096), daemon_cpu_s=0.5,
                      daemon_rss_kib=rss)
    exact_booked = {name: SiteTotals(allocated=round(site.allocated * (1 + dh_error)))
                    for name, site in exact.items()}
    return {"unprofiled": [vs.Run(int(base * 1e6))],
            vs.DROIDHEAP: [run(dh, dh_rss, exact_booked)],
            vs.HEAPPROFD: [run(hp, hp_rss, booked)]}


def test_table_row_meets_its_goals_and_names_what_heapprofd_did_not_unwind(vs):
    workload = vs.workloads(1000)[3]  # alloc_sites 4t
    lines = vs.format_table([(workload, 4096, _cell(vs, 100, 150, 600,
                                                    hp_missing=["site_thread_calloc"]))])
    row = next(line for line in lines if "alloc_sites 4t" in line)
    assert "1.50x" in row and "6.00x" in row and row.endswith("met")
    assert "0.0/7" in row and "0.0/6" in row
    assert "goals missed: none" in lines
    assert any("heapprofd: site_thread_calloc unwound: no (a thread" in line for line in lines)


def test_table_says_plainly_which_goals_a_row_misses(vs):
    workload = vs.workloads(1000)[0]  # malloc_churn 1t
    lines = vs.format_table([(workload, 1, _cell(vs, 100, 250, 600, dh_rss=50000))])
    assert next(line for line in lines if "malloc_churn 1t" in line).endswith("MISSED")
    missed = lines[lines.index("goals missed:") + 1:]
    assert any("overhead 2.50x is more than a third of heapprofd's 6.00x (the time it adds: "
               "30% of what heapprofd adds)" in line for line in missed)
    assert any("daemon peak RSS 48.8 MiB above heapprofd's 39.1 MiB" in line for line in missed)


def test_droidheaps_error_is_held_against_heapprofds_over_the_sites_both_booked(vs):
    workload = vs.workloads(1000)[3]
    lines = vs.format_table([(workload, 1, _cell(vs, 100, 110, 600, dh_error=0.02,
                                                 hp_missing=["site_thread_calloc"]))])
    assert any("max error 2.0% above heapprofd's 0.0% over the 6 sites both booked" in line
               for line in lines)
