"""`python -m mtpbench` runs the CLI."""

from mtpbench.cli import main

main()
