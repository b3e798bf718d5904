#!/usr/bin/env bash
# Runs every benchmark in bench/ in sequence with its default sizes.
#
#     bench/run_all.sh            # needs redis-server on PATH and `pip install -e '.[bench]'`
#     PYTHON=python3.11 bench/run_all.sh
#
# Each benchmark starts its own private redis-server; a failing benchmark does not stop the
# others, and the script exits non-zero if any failed.
set -uo pipefail

cd "$(dirname "$0")/.."
python="${PYTHON:-python}"
status=0
for script in throughput.py latency.py renewal.py many_jobs.py peers.py bulk_dispatch.py; do
    echo "== bench/$script ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    if ! "$python" "bench/$script"; then
        echo "!! bench/$script failed" >&2
        status=1
    fi
    echo
done
exit "$status"
