"""The chaos checker on small synthetic histories: each kind of violation is caught with
a message that names it, and a clean history passes.  Pure and fast."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import Drain, Freeze, History, Kill, Note, Report, check, render
from tests.chaos.ledger import LedgerTail, ProcessFate, Run, parse_lines


def run(key: str, token: int, pid: int, start: float, last: float, *, ended: str | None = "return",
        kind: str = "short", notes: tuple[int, ...] = (), resumed: Any = None,
        saves: tuple[Any, ...] = ()) -> Run:
    return Run(key=key, token=token, pid=pid, attempt=1, kind=kind, started=start,
               last_line=last, ended=ended, notes=list(notes), resumed=resumed,
               saves=list(saves))


def record(state: str, error: str | None = None) -> dict[str, Any]:
    return {"state": state, "error": error}


def clean() -> History:
    """A short job, a long-running job moved once then stopped, with notes, a failing
    job, a stopped job, a supervisor kill and a drain: all as promised."""
    return History(
        runs=[
            run("s1", 1, 101, 10.0, 10.5),
            run("l1", 2, 102, 10.0, 20.0, ended="stop:rebalance", kind="long", notes=(1, 2),
                saves=({"count": 5},)),
            run("l1", 5, 103, 20.3, 30.0, ended="stop:stop", kind="long", notes=(3,),
                resumed={"count": 5}),
            run("f1", 3, 104, 11.0, 11.2, ended="raise", kind="failing"),
            run("st1", 4, 105, 12.0, 15.0, ended="stop:stop", kind="stoppable"),
            run("k1", 6, 106, 40.0, 41.0, ended=None),
            run("k1", 8, 107, 43.5, 44.0),
        ],
        fates={101: ProcessFate(101, 10.55, 10.6), 102: ProcessFate(102, 20.1, 20.2),
               103: ProcessFate(103, 30.0, 30.1), 104: ProcessFate(104, None, 11.3),
               105: ProcessFate(105, 15.0, 15.1), 106: ProcessFate(106, 41.02, 41.1),
               107: ProcessFate(107, 44.0, 44.1)},
        kinds={"s1": "short", "l1": "long", "f1": "failing", "st1": "stoppable", "k1": "short"},
        stops={"st1": 14.9, "l1": 29.9},
        notes={"l1": [Note(1, 11.0), Note(2, 12.0), Note(3, 21.0)]},
        records={"s1": record("succeeded"), "l1": record("stopped"),
                 "f1": record("failed", "RuntimeError: chaos failure"),
                 "st1": record("stopped"), "k1": record("succeeded")},
        faults=["kill_supervisor", "drain"],
        kills=[Kill("a", 41.05, ("k1", "s1"))],
        drains=[Drain("b", 0)],
    )


def violations(report: Report, kind: str) -> list[str]:
    return [violation.message for violation in report.violations if violation.kind == kind]


def test_a_clean_history_passes_with_its_counts() -> None:
    report = check(clean())
    assert report.ok, render(report)
    assert report.counts["executions"] == 7
    assert report.counts["moves"] == {"rebalance": 1}
    assert report.counts["jobs by kind"]["short"] == 2
    assert report.counts["faults by kind"] == {"kill_supervisor": 1, "drain": 1}
    assert report.counts["largest failover s"] == 2.45
    assert report.counts["slowest child exit after a supervisor SIGKILL s"] == 0.05
    assert report.counts["uncertain windows"] == 0
    assert "OK: no violation" in render(report)


def test_1_two_processes_of_a_key_alive_at_once() -> None:
    history = clean()
    history.runs.append(run("s1", 9, 108, 10.3, 10.9))
    report = check(history)
    assert violations(report, "overlap") == [
        "key s1: pid 101 (token 1) was alive 250 ms after pid 108 (token 9) started"]
    assert "FAILED: 1 violation(s)" in render(report)


def test_1_the_monitor_seeing_a_process_in_proc_proves_it_alive() -> None:
    history = clean()
    history.runs.append(run("s1", 9, 108, 10.52, 10.9))  # after 101's last line, 10.5
    assert violations(check(history), "overlap") == [
        "key s1: pid 101 (token 1) was alive 30 ms after pid 108 (token 9) started"]


def test_1_a_reused_child_outlives_its_job_that_wrote_its_end() -> None:
    """Pid 101 lives on after s1's end line (10.5) as a reused child, idle or running
    other jobs: with s1's handler reused, a later run of s1 overlaps nothing; with the
    process still in s1's run (no end line), it does."""
    history = clean()
    history.fates[101] = ProcessFate(101, 30.0, None)
    history.runs.append(run("s1", 9, 108, 12.0, 12.5))
    assert violations(check(history), "overlap") == [
        "key s1: pid 101 (token 1) was alive 18000 ms after pid 108 (token 9) started"]
    history.reused_handlers = [history.kinds["s1"]]
    assert check(history).ok, render(check(history))
    history.runs[0].ended = None
    assert violations(check(history), "overlap") == [
        "key s1: pid 101 (token 1) was alive 18000 ms after pid 108 (token 9) started"]


def test_1_a_ticks_job_in_a_reused_child_is_known_by_its_runs_kind() -> None:
    """A schedule's tick job is not among the driver's dispatched keys."""
    history = clean()
    history.reused_handlers = ["short"]
    history.runs.append(run("tick-1", 20, 120, 50.0, 50.1))
    history.runs.append(run("tick-1", 21, 121, 53.0, 53.1))
    history.fates[120] = ProcessFate(120, 60.0, None)
    assert check(history).ok, render(check(history))


def test_1_a_start_after_a_killed_process_s_last_sign_is_uncertain_not_a_violation() -> None:
    history = clean()
    history.runs.append(run("k1", 7, 109, 41.05, 42.0))  # 106: last seen 41.02, gone by 41.1
    history.fates[109] = ProcessFate(109, 42.0, 42.1)
    report = check(history)
    assert report.ok, render(report)
    assert report.counts["uncertain windows"] == 1
    assert report.counts["largest possible overlap ms"] == 50


def test_1_a_process_never_seen_gone_leaves_the_overlap_unknown() -> None:
    history = clean()
    history.runs.append(run("s1", 9, 108, 11.0, 11.5))  # 101 absent from the monitor
    history.fates.pop(101)
    report = check(history)
    assert report.ok
    assert report.counts["largest possible overlap ms"] == "unknown"


def test_2_a_token_that_does_not_grow() -> None:
    history = clean()
    history.runs.append(run("s1", 1, 108, 12.0, 12.5))
    assert violations(check(history), "token") == [
        "key s1: pid 108 (token 1) started after pid 101 (token 1) with a token that does "
        "not grow"]


def test_3_a_job_lost_still_running_failed_without_error_or_stopped_by_nobody() -> None:
    history = clean()
    history.kinds.update({"gone": "short", "stuck": "cpu", "mute": "failing"})
    history.records.update({"stuck": record("running"), "mute": record("failed"),
                            "s1": record("stopped")})
    assert violations(check(history), "outcome") == [
        "short job gone: lost (no record)",
        "failing job mute: failed without an error",
        "short job s1: stopped, but nobody stopped it",
        "cpu job stuck: still running",
    ]


def test_4_a_long_running_job_ended_by_a_drain() -> None:
    history = clean()
    history.records["l1"] = record("succeeded")
    history.runs[2].ended = "stop:drain"
    assert violations(check(history), "long") == [
        "long-running job l1 ended succeeded (no error), not by a stop"]


def test_4_a_long_running_run_that_raised() -> None:
    history = clean()
    history.runs[1].ended = "raise"
    assert violations(check(history), "long") == [
        "long-running job l1: pid 102 (token 2) ended by 'raise'"]


def lost_five_times(holders: list[str]) -> dict[str, Any]:
    """A long job's record failed by its lease-loss limit: run n started at 45 + 10n on
    holders[n] and lost its lease at 50 + 10n, counted."""
    events = []
    for n, holder in enumerate(holders):
        events += [{"at": 45.0 + 10 * n, "event": "started", "supervisor": holder,
                    "token": 10 + n, "detail": "attempt 1"},
                   {"at": 50.0 + 10 * n, "event": "lease_lost", "supervisor": holder,
                    "token": 10 + n, "detail": f"counted ({n + 1} in a row); requeued"}]
    return {**record("failed", f"lease lost {len(holders)} times (limit 5), last held by b"),
            "events": events}


def test_4_a_long_running_job_failed_by_lease_losses_its_holders_outages_explain() -> None:
    history = clean()
    history.records["l1"] = lost_five_times(["a", "b", "a", "c", "b"])
    history.kills += [Kill("a", 49.0, ("l1",))]
    history.freezes = [Freeze("b", 58.0, ()), Freeze("a", 69.0, ("l1",)),
                       Freeze("b", 89.9, ("l1",))]
    history.drains.append(Drain("c", 1, store_fault=True, at=77.0))
    assert violations(check(history), "long") == []
    assert check(history).counts["long jobs failed by their holders' outages"] == 1


def test_4_a_long_running_job_failed_by_lease_losses_no_outage_explains() -> None:
    history = clean()
    history.records["l1"] = lost_five_times(["a", "b", "a", "c", "b"])
    history.kills += [Kill("a", 49.0, ("l1",)), Kill("c", 70.0, ("l1",))]  # before c's run
    history.freezes = [Freeze("b", 58.0, ("l1",)), Freeze("a", 69.0, ("l1",)),
                       Freeze("a", 89.0, ("l1",))]  # a, not b, was frozen then
    history.drains.append(Drain("c", 0, at=77.0))  # a clean drain releases its jobs
    assert violations(check(history), "long") == [
        "long-running job l1 ended failed (lease lost 5 times (limit 5), last held by b), not "
        "by a stop; its counted lease losses at 80.0 (c), 90.0 (b) follow no kill or freeze "
        "of their holder"]


def test_4_outage_times_are_on_the_ledger_clock_and_loss_times_on_the_stores() -> None:
    history = clean()
    history.records["l1"] = lost_five_times(["a", "b", "a", "c", "b"])
    history.wall_minus_boot = 1000.0  # so the store's 50.0 is the ledger's -950.0
    history.kills += [Kill("a", 49.0, ("l1",)), Kill("c", 78.5, ("l1",))]
    history.freezes = [Freeze("b", 58.0, ()), Freeze("a", 69.0, ()), Freeze("b", 89.9, ())]
    assert len(violations(check(history), "long")) == 1
    for outage in [*history.kills[1:], *history.freezes]:
        object.__setattr__(outage, "at", outage.at - 1000.0)
    assert violations(check(history), "long") == []


def test_5_a_job_failed_by_its_holders_outages_owes_no_note_sent_in_its_last_run() -> None:
    history = clean()
    history.records["l1"] = lost_five_times(["a", "b", "a", "c", "b"])
    history.freezes = [Freeze(holder, 46.0 + 10 * n, ())
                       for n, holder in enumerate(["a", "b", "a", "c", "b"])]
    history.notes["l1"].append(Note(4, 25.0))  # sent after l1's last run (20.3) began
    assert violations(check(history), "notes") == []
    history.notes["l1"].append(Note(5, 20.0))  # before it: that run had to take it
    assert violations(check(history), "notes") == [
        "key l1: notes [5] were sent before its last run ended and no run took them"]


def test_5_notes_taken_out_of_order_in_a_run() -> None:
    history = clean()
    history.runs[1].notes = [2, 1]
    assert violations(check(history), "notes") == [
        "key l1: pid 102 (token 2) took note 1 after note 2"]


def test_5_a_note_taken_twice_in_a_run_only_if_its_notify_was_retried() -> None:
    history = clean()
    history.runs[1].notes = [1, 2, 2]
    assert violations(check(history), "notes") == [
        "key l1: pid 102 (token 2) took note 2 after note 2"]
    history.notes["l1"][1] = Note(2, 12.0, ambiguous=True)
    assert check(history).ok


def test_5_a_note_sent_before_the_end_and_never_taken_is_lost() -> None:
    history = clean()
    history.notes["l1"].append(Note(4, 25.0))
    history.notes["l1"].append(Note(5, 31.0))  # after the last run ended: not owed
    assert violations(check(history), "notes") == [
        "key l1: notes [4] were sent before its last run ended and no run took them"]


def test_5_a_note_taken_again_by_a_later_run_is_at_least_once() -> None:
    history = clean()
    history.runs[2].notes = [2, 3]
    assert check(history).ok


def test_6_a_job_process_left_running() -> None:
    history = clean()
    history.leftovers.append("pid 4242 key s1")
    assert violations(check(history), "orphan") == [
        "job process left running at the end: pid 4242 key s1"]


def test_a_drain_that_does_not_exit_0() -> None:
    history = clean()
    history.drains += [Drain("c", 1), Drain("a", None), Drain("b", 2, store_fault=True)]
    assert violations(check(history), "drain") == [
        "supervisor c drained with exit code 1",
        "supervisor a did not exit in time after SIGTERM",
        "supervisor b drained with exit code 2"]


def test_a_drain_may_exit_1_while_the_store_fails() -> None:
    history = clean()
    history.drains.append(Drain("c", 1, store_fault=True))
    report = check(history)
    assert report.ok, render(report)
    assert report.counts["drains with exit 1 during a store fault"] == 1


def test_a_run_resuming_from_a_checkpoint_nobody_saved() -> None:
    history = clean()
    history.runs[2].resumed = {"count": 10}
    assert violations(check(history), "checkpoint") == [
        "key l1: pid 103 (token 5) resumed from {'count': 10}, which no earlier run saved"]


def test_the_ledger_parses_runs_and_skips_a_torn_line() -> None:
    lines = [
        '{"e":"start","k":"a","t":3,"p":7,"at":1.0,"attempt":1,"kind":"long","cp":null}',
        '{"e":"alive","k":"a","t":3,"p":7,"at":1.1}',
        '{"e":"note","k":"a","t":3,"p":7,"at":1.2,"n":1}',
        '{"e":"save","k":"a","t":3,"p":7,"at":1.3,"cp":{"count":5}}',
        '{"e":"end","k":"a","t":3,"p":7,"at":1.4,"why":"stop:drain"}',
        '{"e":"alive","k":"a","t":3,"p":',
    ]
    [parsed] = parse_lines(lines)
    assert (parsed.key, parsed.token, parsed.pid, parsed.kind) == ("a", 3, 7, "long")
    assert (parsed.started, parsed.last_line, parsed.ended) == (1.0, 1.4, "stop:drain")
    assert parsed.notes == [1]
    assert parsed.saves == [{"count": 5}]


def test_the_ledger_tail_reads_what_was_appended_since_it_last_looked(tmp_path: Any) -> None:
    path = tmp_path / "ledger"
    tail = LedgerTail(path)
    tail.poll()
    path.write_text('{"e":"start","k":"a","t":1,"p":7,"at":1.0,"attempt":1,"kind":"x"}\n'
                    '{"e":"end","k":"a","t":1,')
    tail.poll()
    assert (tail.started, tail.ended) == ({7}, set())
    with path.open("a") as ledger:
        ledger.write('"p":7,"at":2.0,"why":"return"}\n')
    tail.poll()
    assert tail.ended == {7}


def ticks(fires: int, skipped: int, missed: int, times: list[float]) -> dict[str, Any]:
    return {"name": "tick", "every": 2.0, "fires": fires, "skipped": skipped,
            "missed": missed, "ticks": times}


def test_7_ticks_fired_once_each_with_missed_ones_recorded_pass() -> None:
    history = clean()
    history.schedule_ticks = [ticks(4, 0, 2, [100.0, 102.0, 108.0, 110.0])]
    assert check(history).ok


def test_7_a_tick_fired_twice_is_caught() -> None:
    history = clean()
    history.schedule_ticks = [ticks(5, 0, 0, [100.0, 102.0, 104.0, 106.0])]
    assert violations(check(history), "tick-twice") == ["schedule tick: 5 fires for 4 ticks"]
    history.schedule_ticks = [ticks(5, 1, 0, [100.0, 102.0, 104.0, 106.0])]
    assert violations(check(history), "tick-twice") == [
        "schedule tick: 1 tick(s) fired while their own job was live"]


def test_7_a_tick_neither_fired_nor_recorded_missed_is_lost() -> None:
    history = clean()
    history.schedule_ticks = [ticks(3, 0, 0, [100.0, 102.0, 106.0])]
    assert violations(check(history), "tick-lost") == [
        "schedule tick: 4 ticks from the first fired to the last, 3 fired and 0 recorded missed"]


def test_a_pid_used_again_by_a_later_run_keeps_the_earlier_runs_saves() -> None:
    """Found by the 30-minute --overlap run (seed 42): the pids wrapped, a later job got
    an earlier run's pid, and that run's saves and notes were lost to the checker."""
    parsed = parse_lines([
        '{"e":"start","k":"a","t":3,"p":7,"at":1.0,"attempt":1,"kind":"long","cp":null}',
        '{"e":"save","k":"a","t":3,"p":7,"at":1.3,"cp":{"count":5}}',
        '{"e":"note","k":"a","t":3,"p":7,"at":1.4,"n":1}',
        '{"e":"start","k":"b","t":9,"p":7,"at":5.0,"attempt":1,"kind":"short","cp":null}',
        '{"e":"end","k":"b","t":9,"p":7,"at":5.1,"why":"return"}',
    ])
    assert [(run.key, run.token, run.saves, run.notes) for run in parsed] == [
        ("a", 3, [{"count": 5}], [1]), ("b", 9, [], [])]


def limited(*runs: Run) -> History:
    """A clean history plus three jobs of the limited handler (max_running 2)."""
    history = clean()
    for key in ("m1", "m2", "m3"):
        history.kinds[key] = "limited"
        history.records[key] = record("succeeded")
    history.runs += runs
    return history


def test_8_three_limited_jobs_alive_at_once_is_a_violation() -> None:
    report = check(limited(run("m1", 20, 201, 50.0, 52.0), run("m2", 21, 202, 50.5, 51.8),
                           run("m3", 22, 203, 51.5, 53.0)))

    assert [v.kind for v in report.violations] == ["max_running"]
    assert "3 limited jobs alive at once (limit 2) when pid 203" in str(report.violations[0])


def test_8_a_limited_job_starting_as_another_ends_is_fine() -> None:
    history = limited(run("m1", 20, 201, 50.0, 52.0), run("m2", 21, 202, 50.5, 51.0),
                      run("m3", 22, 203, 51.2, 53.0))

    assert check(history).ok, render(check(history))
