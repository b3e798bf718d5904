"""`poolsup web`: the dashboard (the `web` extra: Starlette, uvicorn, Jinja2)."""
