"""What the client reports of a pool, as plain JSON-able values built from the store's
records: the CLI prints them, the dashboard shows them (both through the client)."""
