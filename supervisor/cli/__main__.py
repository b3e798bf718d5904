"""`python -m supervisor.cli`: the `poolsup` command."""

from supervisor.cli.main import main

main()
