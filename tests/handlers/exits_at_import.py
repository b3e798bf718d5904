"""A handler file whose import kills the process importing it (the fork server)."""

import os

os._exit(3)


def run(job):  # type: ignore[no-untyped-def]
    return None
