"""``neox-epoch`` command line: one subcommand per module, errors mapped to exit codes.

Exit codes: 0 success, 1 findings (audit, check-batch, plan with ``enforce``), 2 bad input (any
:class:`NeoxEpochError`: a damaged or invalid input, or the environment: stdout closed or full, see
neox_epoch.util.stdout), 3 internal error (an unexpected exception: one line naming the command and its
input; the traceback only with ``--debug``).
Each subcommand module provides ``register(subparsers)`` (adds its parser, sets ``func``) and a
``run(args) -> int`` function.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from neox_epoch import __version__
from neox_epoch.errors import NeoxEpochError, OutputError
from neox_epoch.util import stdout

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


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neox-epoch",
        description="Exact epochs for GPT-NeoX and megatron-core pretraining: plan, audit, check.",
    )
    parser.add_argument("--version", action="version", version=f"neox-epoch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error (exit 3)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if a in COMMANDS), None)
    for name, module in COMMANDS.items():
        if wanted is not None and name != wanted:
            sub.add_parser(name, help=f"see neox-epoch {name} --help")
            continue
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as err:
            if err.name and err.name.startswith("neox_epoch"):
                continue  # subcommand not part of this build
            raise
    return parser


def no_command(parser: argparse.ArgumentParser) -> str:
    """What a bare ``neox-epoch`` prints (on stderr): the usage line, the commands, one error line."""
    lines = [parser.format_usage().strip(), "commands:"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines += [f"  {choice.dest:<13} {choice.help}" for choice in action._choices_actions]
    lines.append(
        "neox-epoch: error: no command given; choose one (neox-epoch COMMAND --help shows its options and examples)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_blas(argv)
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    args.raw_argv = argv
    args.main = main  # for a command that runs others as typed (demo)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        print(no_command(parser), file=sys.stderr)
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
