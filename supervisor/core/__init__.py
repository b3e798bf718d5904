"""The pure decision core: plain values in, frozen values out.

Nothing here does I/O, reads a clock or draws a random number: callers pass `now`
and random fractions in.  tests/unit/test_core_is_pure.py keeps it that way.
"""
