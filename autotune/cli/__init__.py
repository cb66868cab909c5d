"""The ``autotune`` command: one module per subcommand, registered in :data:`autotune.cli._main.SUBCOMMANDS`."""

from autotune.cli._main import main

__all__ = ["main"]
