"""The `poolsup` command line."""
