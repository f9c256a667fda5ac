"""`x402-eur help`: the command line's full reference, read where the package has it
(`x402-eur help COMMAND`: that command's `--help`).

The reference is `docs/cli.md` of the repository. The wheel carries it as
`x402_client/cli/reference.md` (pyproject's `force-include`), so a pip user reads the same
text with `x402-eur help`; a source checkout reads `docs/cli.md` itself."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from ._common import _Trouble

#: The reference's name inside the package (the wheel's copy of docs/cli.md).
PACKAGED = "reference.md"


def reference_text() -> str:
    """The reference: the package's copy, else the source checkout's docs/cli.md."""
    packaged = resources.files(__package__ or "x402_client.cli").joinpath(PACKAGED)
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
    if checkout.is_file():
        return checkout.read_text(encoding="utf-8")
    raise _Trouble(
        "this installation carries no reference: `x402-eur --help` and "
        "`x402-eur COMMAND --help` list every option"
    )


async def _help(args: argparse.Namespace) -> int:
    """The reference; `x402-eur help COMMAND` is that command's `--help`."""
    if args.topic is not None:
        from ._arguments import _parser

        _parser().parse_args([args.topic, "--help"])  # prints it and exits 0
    sys.stdout.write(reference_text())
    return 0
