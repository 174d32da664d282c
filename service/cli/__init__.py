"""The `rljob` command line (Typer + rich)."""
