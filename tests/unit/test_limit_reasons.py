"""What a job's error says when the fork server ends it for a limit."""

from sandbox.limits import format_size, memory_reason

MIB = 1 << 20


def test_a_peak_just_over_the_limit_never_reads_as_the_limit() -> None:
    assert memory_reason(100 * MIB, 100 * MIB + 4096) == (
        "memory limit 100 MiB exceeded (peak 100.1 MiB)")


def test_sizes_read_in_tenths_of_their_unit() -> None:
    assert format_size(512) == "512 bytes"
    assert format_size(100 * MIB) == "100 MiB"
    assert format_size(int(1.5 * (1 << 30))) == "1.5 GiB"
    assert format_size(100 * MIB + 4096) == "100 MiB"
