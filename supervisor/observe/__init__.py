"""What the supervisor shows of itself while it works: its metrics, its health, and how its
loops report a failing store.  Below the job and the pool, which record into it; above the
store and the pure core."""
