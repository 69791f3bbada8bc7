"""CLI command implementations; src/rlvr/cli.py only wires them into the typer app."""
