"""Input files named on the command line; ``-`` is standard input."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click


class InputFile(click.Path):
    """An existing file, or ``-``: standard input, copied to a temporary file (removed when the
    command ends) so that whatever reads the path (the authorization rule, then the command) reads
    the same document."""

    def __init__(self) -> None:
        super().__init__(exists=True, dir_okay=False, path_type=Path, allow_dash=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if str(value) != "-":
            return super().convert(value, param, ctx)
        text = sys.stdin.read()
        handle, name = tempfile.mkstemp(prefix="rebound-stdin-", suffix=".yaml")
        with os.fdopen(handle, "w") as sink:
            sink.write(text)
        path = Path(name)
        if ctx is not None:
            ctx.call_on_close(lambda: path.unlink(missing_ok=True))
        return path


INPUT_FILE = InputFile()
