import ctypes

from hostile_pids import record


def run(job):
    record(job)
    ctypes.string_at(0)  # reads address 0: SIGSEGV
