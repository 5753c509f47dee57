"""`python -m flows.cli`: the es-sink command."""

from flows.cli import main

main()
