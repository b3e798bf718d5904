import os

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
    first = procfs.sample(os.getpid())
    assert first is not None
    later = first
    while later.taken_at - first.taken_at < 0.2:
        sampled = procfs.sample(os.getpid())
        assert sampled is not None
        later = sampled
    assert 20.0 <= procfs.cpu_percent(first, later) <= 120.0
