"""Allocates 300 MB in 10 MB steps, as fast as it can, touching every page."""

from hostile_pids import record


def run(job):
    record(job)
    chunks = []
    for _ in range(30):
        chunks.append(b"\x01" * (10 << 20))
    return {"allocated_mb": 10 * len(chunks)}
