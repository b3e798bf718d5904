"""A tick given back unapplied (its supervisor stopped mid-plan) fires again, or counts as
missed once a later tick is due: the pure decision, with explicit times."""

from __future__ import annotations

from supervisor.core.ticks import Every, Fire, Wait, decide_tick, tick_abandoned


def test_a_released_tick_fires_again_while_it_is_the_latest() -> None:
    every = Every(300)
    decision = decide_tick(every, name="s", jitter=0, last_tick=900.0, released=True, now=1000.0)
    assert decision == Fire(tick=900.0, not_before=900.0, missed=0)
    assert decide_tick(every, name="s", jitter=0, last_tick=900.0, now=1000.0) == Wait(
        until=1200.0)


def test_a_released_tick_past_a_later_one_counts_as_missed() -> None:
    every = Every(300)
    decision = decide_tick(every, name="s", jitter=0, last_tick=300.0, released=True, now=1000.0)
    assert decision == Fire(tick=900.0, not_before=900.0, missed=2)  # 600, and 300 given back


def test_a_producer_tick_is_abandoned_only_past_its_timeout_and_the_grace() -> None:
    def abandoned(outcome: str | None, now: float) -> bool:
        return tick_abandoned(outcome=outcome, fired_at=1000.0, timeout=60.0, grace=30.0,
                              now=now)

    assert not abandoned("fired", 1090.0)
    assert abandoned("fired", 1090.5)
    assert not abandoned("applied", 5000.0)
    assert not abandoned("dispatched", 5000.0)
    assert not abandoned(None, 5000.0)
