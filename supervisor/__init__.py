"""poolsup: a per-host supervisor for durable, keyed jobs."""
