"""A job's way through the supervisor: claim, spawn, run, settle."""
