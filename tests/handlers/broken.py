"""A handler file that fails to import."""

import poolsup_no_such_module  # noqa: F401


def run(job: object) -> None:
    pass
