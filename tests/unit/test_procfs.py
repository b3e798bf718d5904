import os
import time

import psutil

from supervisor.forks import procfs


def test_sample_matches_psutil_for_this_process() -> None:
    sample = procfs.sample(os.getpid())
    assert sample is not None
    rss = psutil.Process().memory_info().rss
    assert abs(sample.rss_bytes - rss) < 16 * 2**20
    assert sample.cpu_seconds > 0


def test_sample_of_a_gone_process_is_none() -> None:
    assert procfs.sample(2**22 + 12345) is None


def test_cpu_percent_over_a_busy_interval() -> None:
    # What this process got of a core while it spun, as the kernel counted it: on a
    # loaded machine that may be far below 100%, so the figure is compared with the
    # process's own CPU clock over the same interval (ticks of 10 ms: a few points).
    first = procfs.sample(os.getpid())
    cpu_before = time.process_time()
    assert first is not None
    later = first
    while later.taken_at - first.taken_at < 0.5:
        sampled = procfs.sample(os.getpid())
        assert sampled is not None
        later = sampled
    got = 100.0 * (time.process_time() - cpu_before) / (later.taken_at - first.taken_at)
    assert 0.0 < procfs.cpu_percent(first, later) <= 120.0
    assert abs(procfs.cpu_percent(first, later) - got) <= 10.0
