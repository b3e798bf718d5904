"""The child side of poolsup: handler loading, the job context, limits."""
