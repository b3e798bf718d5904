"""The lease-loss rule (core/lease_losses.py): a loss counts unless the recovering
supervisor saw the store failing over the lease's end."""

from __future__ import annotations

from supervisor.core.lease_losses import (
    FailingWindow,
    Recovery,
    WriteGap,
    claim_note_due,
    failing_window,
    judged_later,
    loss_counts,
    recovery,
    write_gap,
)

MIN_SPAN = 0.25


def test_a_claim_that_went_through_at_once_witnessed_no_failure() -> None:
    assert failing_window(100.0, 100.004, min_span=MIN_SPAN) is None


def test_a_supervisor_that_never_heard_from_the_store_witnessed_no_failure() -> None:
    assert failing_window(None, 100.0, min_span=MIN_SPAN) is None


def test_a_claim_held_up_or_sent_after_failures_spans_the_failure() -> None:
    assert failing_window(98.0, 100.0, min_span=MIN_SPAN) == FailingWindow(98.0, 100.0)


def test_a_lease_that_ended_inside_the_window_is_not_counted() -> None:
    window = FailingWindow(98.0, 100.0)
    assert not loss_counts(98.0, window)
    assert not loss_counts(99.5, window)
    assert not loss_counts(100.0, window)


def test_a_lease_that_ended_outside_the_window_counts() -> None:
    window = FailingWindow(98.0, 100.0)
    assert loss_counts(97.9, window)  # its holder stopped renewing before the store failed
    assert loss_counts(100.1, window)


def test_without_a_window_or_a_known_end_the_loss_counts() -> None:
    assert loss_counts(99.0, None)
    assert loss_counts(None, FailingWindow(98.0, 100.0))


def test_a_stop_asked_for_ends_the_job_whatever_its_losses() -> None:
    assert recovery(9, stop_requested=True, max_losses=5) is Recovery.STOPPED


def test_the_job_fails_once_its_losses_reach_the_limit() -> None:
    assert recovery(4, stop_requested=False, max_losses=5) is Recovery.REQUEUED
    assert recovery(5, stop_requested=False, max_losses=5) is Recovery.FAILED


def test_no_limit_never_fails_it() -> None:
    assert recovery(1000, stop_requested=False, max_losses=0) is Recovery.REQUEUED


def test_a_write_soon_after_the_last_one_ends_no_gap() -> None:
    assert write_gap(99.5, 100.0, min_gap=1.0) is None
    assert write_gap(None, 100.0, min_gap=1.0) is None


def test_a_write_long_after_the_last_one_ends_a_gap() -> None:
    assert write_gap(97.0, 100.0, min_gap=1.0) == WriteGap(97.0, 100.0)


def test_a_claim_soon_after_the_last_noted_one_writes_nothing() -> None:
    assert not claim_note_due(99.9, 100.0, None, every=0.25)
    assert not claim_note_due(100.0, 100.0, None, every=0.25)


def test_a_claim_notes_itself_once_the_last_noted_is_old_or_unknown() -> None:
    assert claim_note_due(99.75, 100.0, None, every=0.25)
    assert claim_note_due(None, 100.0, None, every=0.25)


def test_a_claim_that_ends_a_gap_always_notes_itself() -> None:
    assert claim_note_due(99.0, 100.0, WriteGap(99.0, 100.0), every=5.0)


def test_a_last_claim_ahead_of_the_clock_is_written_over() -> None:
    """The store's clock stepped back: left alone, the last claim would stay ahead and
    no gap would show until the clock came back to it."""
    assert claim_note_due(160.0, 100.0, None, every=0.25)


def test_a_lease_that_ended_in_a_recent_gap_waits_for_a_claim_that_witnessed_it() -> None:
    gap = WriteGap(97.0, 100.0)
    assert judged_later(98.0, None, gap, 100.5, ttl=2.0, defer=2.0)


def test_a_witness_of_the_gap_judges_at_once() -> None:
    gap = WriteGap(97.0, 100.0)
    assert not judged_later(98.0, FailingWindow(96.5, 100.5), gap, 100.5, ttl=2.0, defer=2.0)


def test_once_the_gap_ended_defer_ago_anyone_judges() -> None:
    gap = WriteGap(97.0, 100.0)
    assert not judged_later(98.0, None, gap, 102.0, ttl=2.0, defer=2.0)


def test_a_lease_that_the_gap_cannot_have_ended_is_judged_at_once() -> None:
    gap = WriteGap(97.0, 100.0)
    assert not judged_later(96.0, None, gap, 100.5, ttl=2.0, defer=2.0)  # ended before it
    assert not judged_later(102.2, None, gap, 102.5, ttl=2.0, defer=2.0)  # a ttl after it
    assert not judged_later(98.0, None, None, 100.5, ttl=2.0, defer=2.0)


def test_a_lease_that_ended_within_a_ttl_after_the_gap_waits_for_a_witness() -> None:
    """Its renewals fell in the gap (found by the 30-minute --overlap chaos run)."""
    gap = WriteGap(97.0, 100.0)
    assert judged_later(101.5, None, gap, 101.8, ttl=2.0, defer=2.0)
    assert not judged_later(101.5, None, gap, 103.5, ttl=2.0, defer=2.0)  # defer after it
    assert not judged_later(102.5, None, gap, 102.8, ttl=2.0, defer=2.0)  # past a ttl
