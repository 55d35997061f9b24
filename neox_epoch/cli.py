"""``neox-epoch`` command line: one subcommand per module, errors mapped to exit codes.

Exit codes: 0 success, 1 findings (audit, check-batch, plan with ``enforce``), 2 bad input (any
:class:`NeoxEpochError`: a damaged or invalid input, or the environment: stdout closed or full, see
neox_epoch.util.stdout), 3 internal error (an unexpected exception: one line naming the command and its
input; the traceback only with ``--debug``).
Each subcommand module provides ``register(subparsers)`` (adds its parser, sets ``func``) and a
``run(args) -> int`` function. The global options (``-v``, ``--debug``, ``--version``) go before or after the
command's name: :class:`Commands` gives every command's parser them as an argparse parent parser. Public argparse
only (no private attribute of the parser or its actions).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from neox_epoch import __version__
from neox_epoch.errors import NeoxEpochError, OutputError
from neox_epoch.util import stdout
from neox_epoch.util.helptext import wrapped

#: exit code of an unexpected exception (a bug), distinct from bad input (2)
INTERNAL_ERROR = 3

#: subcommand modules, imported lazily so ``neox-epoch plan`` never imports torch or deepspeed
COMMANDS: dict[str, str] = {
    "plan": "neox_epoch.plan.cli",
    "audit": "neox_epoch.audit.cli",
    "check-batch": "neox_epoch.batch.cli",
    "demo": "neox_epoch.demo",
    "launch": "neox_epoch.megatron_lm.launch",
    "report": "neox_epoch.run_report.cli",
    "resume-check": "neox_epoch.resume.cli",
}

#: commands that start other programs: they keep the environment as it is (see :func:`quiet_blas`)
STARTS_PROGRAMS = ("launch",)


def quiet_blas(argv: Sequence[str]) -> None:
    """numpy's OpenBLAS pool to one thread unless the user chose (``OPENBLAS_NUM_THREADS``), before numpy's import:
    no command uses BLAS, and its threads spin on the other core for about 0.1 s after the import, beside the audit's
    two (its wall x0.95 at 30M samples, ``bench/audit_bench.py``)."""
    command = next((arg for arg in argv if arg in COMMANDS), None)  # (as build_parser finds it)
    if command not in STARTS_PROGRAMS and "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def one_line(message: str) -> str:
    """``message`` on one line (a wrapped YAML or DeepSpeed error keeps its words, loses its line breaks)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


#: the global options that take no value (``--version`` prints and exits): every command takes them, before or
#: after its name
GLOBAL_FLAGS = ("-v", "--verbose", "--debug")


def global_options(inherited: bool) -> argparse.ArgumentParser:
    """The global options as a parent parser. A command's copy (``inherited``) has no default, so that its parse
    keeps what the main parser found before the command's name (argparse copies a subparser's defaults over it)."""
    default = argparse.SUPPRESS if inherited else False
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("global options (before or after the command)")
    group.add_argument("--version", action="version", version=f"neox-epoch {__version__}")
    group.add_argument("-v", "--verbose", action="store_true", default=default, help="log at DEBUG level")
    group.add_argument(
        "--debug", action="store_true", default=default, help="print the traceback of an internal error (exit 3)"
    )
    return parent


class Commands:
    """The subparsers handed to each command's ``register``: every parser added gets the global options, and the
    commands' names and help lines are kept for :func:`no_command` (argparse's own list of them is private)."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub
        self.choices = sub.choices  # (public: the name -> parser map; launch extends its parser)
        self.helps: dict[str, str] = {}
        self.parent = global_options(inherited=True)

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", ()), self.parent]
        if "description" in kwargs:  # kept as given by examples()' formatter: filled here as argparse would
            kwargs["description"] = wrapped(kwargs["description"])
        self.helps[name] = str(kwargs.get("help", ""))
        parser: argparse.ArgumentParser = self.sub.add_parser(name, **kwargs)
        return parser


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neox-epoch",
        description="Exact epochs for GPT-NeoX and megatron-core pretraining: plan, audit, check.",
        parents=[global_options(inherited=False)],
    )
    commands = Commands(parser.add_subparsers(dest="command", metavar="COMMAND"))
    wanted = next((a for a in argv if a in COMMANDS), None)
    for name, module in COMMANDS.items():
        if wanted is not None and name != wanted:
            commands.add_parser(name, help=f"see neox-epoch {name} --help")
            continue
        try:
            importlib.import_module(module).register(commands)
        except ModuleNotFoundError as err:
            if err.name and err.name.startswith("neox_epoch"):
                continue  # subcommand not part of this build
            raise
    parser.set_defaults(command_helps=commands.helps)
    return parser


def no_command(parser: argparse.ArgumentParser, helps: dict[str, str]) -> str:
    """What a bare ``neox-epoch`` prints (on stderr): the usage line, the commands, one error line."""
    lines = [parser.format_usage().strip(), "commands:"]
    lines += [f"  {name:<13} {text}" for name, text in helps.items()]
    lines.append(
        "neox-epoch: error: no command given; choose one (neox-epoch COMMAND --help shows its options and examples)"
    )
    return "\n".join(lines)


def command_tokens(argv: Sequence[str], command: str | None) -> list[str]:
    """The command line as the commands re-read it (Megatron-LM flags after ``plan``, ``resume-check``): without
    the global options argparse took. ``launch`` keeps its line as typed (its own options drop them)."""
    if command in STARTS_PROGRAMS:
        return list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    return [t for k, t in enumerate(argv) if k >= end or t not in GLOBAL_FLAGS]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_blas(argv)
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    args.raw_argv = command_tokens(argv, args.command)
    args.main = main  # for a command that runs others as typed (demo)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        print(no_command(parser, args.command_helps), file=sys.stderr)
        return 2
    if sys.stdout is None:  # started with fd 1 closed: nothing it prints would reach anyone
        print(f"neox-epoch {args.command}: error: {stdout.closed_error()}", file=sys.stderr)
        return 2
    real_stdout, sys.stdout = sys.stdout, stdout.GuardedStdout(sys.stdout)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a full stdout fails here, not at the interpreter's exit
        return code
    except NeoxEpochError as err:
        print(f"neox-epoch {args.command}: error: {one_line(str(err))}", file=sys.stderr)
        if isinstance(err, OutputError) and str(err).startswith("standard output"):
            stdout.discard()
        return err.exit_code
    except BrokenPipeError:  # output piped into head and closed
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("neox-epoch: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # the last line of defence: one line, never a traceback unless asked
        if args.debug:
            raise
        inputs = " ".join(a for a in argv if a != args.command)[:300]
        print(
            f"neox-epoch {args.command}: internal error: {type(err).__name__}: {one_line(str(err))} (input: {inputs}); "
            "this is a bug in neox-epoch: rerun with --debug for the traceback and report it",
            file=sys.stderr,
        )
        return INTERNAL_ERROR
    finally:
        sys.stdout = real_stdout


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
