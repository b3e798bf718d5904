"""Draw one peers.py run as a PNG: throughput per system with the physical floor as a
line, and dispatch-to-start latency (p50, p99) per system.

    python bench/chart.py [bench/results/peers-....json] [--out bench/peers.png]

Needs matplotlib (the `bench` extra). Without a file it draws the newest result.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BENCH = Path(__file__).resolve().parent
ORDER = ("poolsup", "poolsup-reused", "rq", "celery")
NAMES = {"poolsup": "poolsup\n(fresh process)", "poolsup-reused": "poolsup\n(reused, 100)",
         "rq": "RQ\n(fork)", "celery": "Celery\n(prefork)"}
COLORS = {"poolsup": "#2b6cb0", "poolsup-reused": "#63b3ed", "rq": "#a0aec0",
          "celery": "#718096"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("result", nargs="?", type=Path)
    parser.add_argument("--out", type=Path, default=BENCH / "peers.png")
    args = parser.parse_args()
    path = args.result or max((BENCH / "results").glob("peers-*.json"))
    run = json.loads(path.read_text())
    results, settings = run["results"], run["settings"]
    systems = [name for name in ORDER if name in results]

    def value(system: str, phase: str, field: str) -> float:
        entry = results.get(system, {}).get(phase, {})
        return float(entry.get(field, 0.0)) if isinstance(entry, dict) else 0.0

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    rates = [value(name, "throughput", "jobs_per_s") for name in systems]
    bars = left.bar([NAMES[n] for n in systems], rates, color=[COLORS[n] for n in systems])
    left.bar_label(bars, fmt="%.0f")
    floor = value("floor", "throughput", "jobs_per_s")
    if floor:
        left.axhline(floor, color="#c53030", linestyle="--", linewidth=1)
        left.text(-0.4, floor, f"floor: a bare fork per job, {floor:.0f}/s",
                  color="#c53030", ha="left", va="bottom", fontsize=8)
        left.set_ylim(0, max([floor, *rates]) * 1.15)
    left.set_ylabel("no-op jobs per second")
    left.set_title(f"Throughput ({settings['workers']} workers, {settings['jobs']} jobs)")

    width = 0.38
    positions = range(len(systems))
    p50 = [value(name, "latency", "p50_ms") for name in systems]
    p99 = [value(name, "latency", "p99_ms") for name in systems]
    right.bar([x - width / 2 for x in positions], p50, width, label="p50", color="#2f855a")
    right.bar([x + width / 2 for x in positions], p99, width, label="p99", color="#9ae6b4")
    right.set_xticks(list(positions), [NAMES[n] for n in systems])
    right.set_ylabel("ms")
    right.set_title(f"Dispatch to handler start, idle ({settings['samples']} samples)")
    right.legend()
    figure.suptitle(f"{run['started'][:16].replace('T', ' ')} UTC, {settings['cores']} cores "
                    f"({settings['cpu']}), one redis-server", fontsize=9)
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    print(f"chart: {args.out}")


if __name__ == "__main__":
    main()
