"""``--help`` text shared by the subcommands: a description wrapped as argparse wraps it, and an epilog of
examples kept line by line (``examples(...)`` gives the epilog and formatter to ``add_parser``; neox_epoch.cli
wraps each command's description). Public argparse only: no formatter methods overridden."""

from __future__ import annotations

import argparse
import re
import shutil
import textwrap
from typing import Any


def examples(*lines: str) -> dict[str, Any]:
    """``add_parser`` keywords for an epilog listing ``lines`` (commands, each optionally ``  # why``); argparse's
    RawDescriptionHelpFormatter keeps them line by line (and the description as given: :func:`wrapped`)."""
    return {
        "epilog": "examples:\n" + "\n".join("  " + line for line in lines),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def wrapped(text: str) -> str:
    """``text`` filled as argparse fills a description: whitespace collapsed, the terminal's width less 2."""
    return textwrap.fill(" ".join(text.split()), max(shutil.get_terminal_size().columns - 2, 11))


def option_names(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string ``parser`` takes, read from its ``--help`` (the lines listing them): for a did-you-mean."""
    names: list[str] = []
    for line in parser.format_help().splitlines():
        if line.startswith("  -"):
            names += re.findall(r"(?:^|, )(--?[A-Za-z][\w-]*)", re.split(r"\s{2,}", line.strip())[0])
    return names
