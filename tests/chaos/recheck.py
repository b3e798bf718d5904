"""Check a kept chaos run again, with this checker: `python -m tests.chaos.recheck DIR`
(DIR holds the run's history.json and ledger.jsonl); prints the report, exits 1 on a
violation.  For a checker fixed after a run that took half an hour."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.chaos.checker import Drain, Freeze, History, Kill, Note, check, render
from tests.chaos.ledger import ProcessFate, read_ledger


def load_history(directory: Path) -> History:
    saved = json.loads((directory / "history.json").read_text())
    return History(
        runs=read_ledger(directory / "ledger.jsonl"),
        fates={int(pid): ProcessFate(**fate) for pid, fate in saved["fates"].items()},
        kinds=saved["kinds"],
        stops=saved["stops"],
        notes={key: [Note(**note) for note in notes] for key, notes in saved["notes"].items()},
        records=saved["records"],
        leftovers=saved["leftovers"],
        faults=saved["faults"],
        kills=[Kill(kill["supervisor"], kill["at"], tuple(kill["keys"]))
               for kill in saved["kills"]],
        freezes=[Freeze(freeze["supervisor"], freeze["at"], tuple(freeze["keys"]))
                 for freeze in saved.get("freezes", [])],
        drains=[Drain(**drain) for drain in saved["drains"]],
        schedule_ticks=saved["schedule_ticks"],
        wall_minus_boot=saved.get("wall_minus_boot", 0.0),
        reused_handlers=saved.get("reused_handlers", []),
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.chaos.recheck DIR", file=sys.stderr)
        return 2
    report = check(load_history(Path(argv[0])))
    print(render(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
