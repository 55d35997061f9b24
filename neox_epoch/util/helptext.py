"""``--help`` text shared by the subcommands: a description wrapped as argparse wraps it, and an epilog of
examples kept line by line (``examples(...)`` gives both to ``add_parser``)."""

from __future__ import annotations

import argparse
from typing import Any


class Formatter(argparse.HelpFormatter):
    """argparse's formatter, except that a text starting with ``examples:`` keeps its lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


def examples(*lines: str) -> dict[str, Any]:
    """``add_parser`` keywords for an epilog listing ``lines`` (commands, each optionally ``  # why``)."""
    return {"epilog": "examples:\n" + "\n".join("  " + line for line in lines), "formatter_class": Formatter}
