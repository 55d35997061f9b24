#!/usr/bin/env python3
"""Ground truth: what GPT-NeoX itself makes of every model config it ships, at several world sizes.

Usage::

    NEOX_DIR=/path/to/gpt-neox python scripts/neox_config_sweep.py OUT.json [--neox-commit SHA]

Run it with a Python environment that can import NeoX (``scripts/neox_env.sh``). Nothing of NeoX is
copied or edited: the script imports NeoX from ``$NEOX_DIR`` and calls its own
``NeoXArgs.from_ymls(paths)`` -- the function ``deepy.py`` calls -- once per pairing and world size.

Pairings: every model config under ``configs/`` (a YAML file that sets ``num_layers``; the
``local_setup*.yml`` files and the JSON autotuning files are not model configs), followed by
``configs/llama/train_config.yml`` for the models under ``configs/llama/`` (as configs/llama/README.md
launches them), then ``configs/local_setup.yml``, then a small world file ``world_N.yml`` holding only
``hostfile: hostfile_N``. The hostfile has ``localhost slots=N`` for N < 8 and ``node{i} slots=8``
lines otherwise: NeoX's ``calculate_derived`` counts ``global_num_gpus`` from the hostfile's resource
pool when the config names one (there are no GPUs here, so ``torch.cuda.device_count()`` would be 0).
``$DLTS_HOSTFILE`` is removed from the environment and ``/job/hostfile`` must not exist, so the world
file is the only source of the count.

NeoX's ``calculate_derived`` asks for the installed flash-attn's version (``importlib.metadata``) when
``attention_config`` uses flash attention; flash-attn needs a GPU build, so when it is not installed the
script puts a metadata-only distribution ``flash-attn`` (version ``FLASH_ATTN_STUB_VERSION``, no code) on
``sys.path``, as on a GPU machine with a recent flash-attn. That is recorded in the output.

Each call runs in a process forked from one that has imported NeoX (a fresh copy of NeoX's state for
every call; NeoX's ``enable_logging`` replaces ``sys.stdout`` and writes ``log_dir`` files, which stay
inside a temporary working directory). Everything NeoX prints is discarded; records it logs at ERROR
level are kept, because several refusals carry their reason only there.

Output (sorted keys, indent 1): per pairing whether NeoX accepted it, the exception type and the first
line of its message when it refused, and the derived batch, schedule, data and parallelism values
when it accepted. Of the config files only the sha1 and key count are recorded: the tests read the files
from the NeoX tree itself (the project carries no NeoX content).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing
import os
import platform
import re
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, NoReturn

#: world sizes swept by default
WORLD_SIZES = (1, 8, 16, 64, 256)
#: slots per node in the generated hostfiles (smaller worlds are one localhost line)
SLOTS_PER_NODE = 8
#: the NeoX config every pairing is combined with (its data paths)
LOCAL_SETUP = "configs/local_setup.yml"
#: models in this directory are launched with its train_config.yml (configs/llama/README.md)
LLAMA_DIR = "configs/llama/"
LLAMA_TRAIN_CONFIG = "configs/llama/train_config.yml"
#: DeepSpeed's default hostfile, which NeoX reads when it exists
DEFAULT_DLTS_HOSTFILE = "/job/hostfile"
#: NeoXArgs attributes recorded for an accepted pairing
RECORDED = (
    "global_num_gpus",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "train_iters",
    "lr_decay_iters",
    "warmup",
    "lr_decay_style",
    "seq_length",
    "data_path",
    "split",
    "train_data_paths",
    "train_data_weights",
    "valid_data_paths",
    "valid_data_weights",
    "test_data_paths",
    "test_data_weights",
    "weight_by_num_documents",
    "eval_interval",
    "eval_iters",
    "train_epochs",
    "checkpoint_factor",
    "save_interval",
    "pipe_parallel_size",
    "model_parallel_size",
    "hostfile",
    "num_gpus",
    "num_nodes",
    "include",
    "exclude",
)
#: version of the metadata-only flash-attn distribution used when flash-attn is not installed
FLASH_ATTN_STUB_VERSION = "2.6.3"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def die(message: str) -> NoReturn:
    """Print a one-line error and exit with status 2."""
    print(f"neox_config_sweep: error: {message}", file=sys.stderr)
    sys.exit(2)


def clean(text: str) -> str:
    """``text`` without ANSI colour codes and surrounding blanks."""
    return _ANSI.sub("", text).strip()


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` (colour codes removed)."""
    for line in clean(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists and anything exotic as its repr (the fixture must be plain JSON)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


# ----------------------------------------------------------------------------------------------
# What is swept
# ----------------------------------------------------------------------------------------------


def load_yaml(path: str) -> Any:
    """A YAML file parsed the way NeoX's from_ymls parses it (``yaml.FullLoader``)."""
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=yaml.FullLoader)


def is_model_config(rel: str, content: Any) -> bool:
    """A shipped model config: sets ``num_layers`` (with ``-`` or ``_``) and is not a local_setup file."""
    if os.path.basename(rel).startswith("local_setup"):
        return False
    if not isinstance(content, dict):
        return False
    return any(str(k).replace("-", "_") == "num_layers" for k in content)


def model_configs(neox_dir: str) -> list[str]:
    """Every model config under ``configs/``, as paths relative to the NeoX tree, sorted."""
    found: list[str] = []
    for root, _dirs, files in os.walk(os.path.join(neox_dir, "configs")):
        for name in files:
            if not name.endswith((".yml", ".yaml")):
                continue
            rel = os.path.relpath(os.path.join(root, name), neox_dir).replace(os.sep, "/")
            if is_model_config(rel, load_yaml(os.path.join(neox_dir, rel))):
                found.append(rel)
    return sorted(found)


def world_files(world_size: int) -> tuple[str, str, list[str]]:
    """(world yml name, hostfile name, hostfile lines) for ``world_size`` GPUs."""
    if world_size < SLOTS_PER_NODE:
        lines = [f"localhost slots={world_size}"]
    else:
        if world_size % SLOTS_PER_NODE:
            die(f"world size {world_size}: expected fewer than {SLOTS_PER_NODE} or a multiple of {SLOTS_PER_NODE}")
        lines = [f"node{i} slots={SLOTS_PER_NODE}" for i in range(world_size // SLOTS_PER_NODE)]
    return f"world_{world_size}.yml", f"hostfile_{world_size}", lines


def pairing_files(model: str, world_size: int) -> list[str]:
    """The config files of one pairing, in the order given to from_ymls (relative to the run directory)."""
    files = [model]
    if model.startswith(LLAMA_DIR):
        files.append(LLAMA_TRAIN_CONFIG)
    files.append(LOCAL_SETUP)
    files.append(world_files(world_size)[0])
    return files


def config_record(neox_dir: str, rel: str) -> dict[str, Any]:
    """A shipped config file: the sha1 of its bytes (the tests read the file itself from the NeoX tree; the
    fixture carries no NeoX content) and how many top-level keys it has."""
    path = os.path.join(neox_dir, rel)
    with open(path, "rb") as f:
        sha1 = hashlib.sha1(f.read()).hexdigest()
    return {"sha1": sha1, "key_count": len(load_yaml(path) or {})}


def prepare_run_dir(neox_dir: str, run_dir: str, world_sizes: Sequence[int]) -> dict[str, Any]:
    """Lay out ``run_dir``: ``configs`` -> the NeoX configs, and one world yml + hostfile per world size."""
    os.symlink(os.path.join(neox_dir, "configs"), os.path.join(run_dir, "configs"))
    worlds: dict[str, Any] = {}
    for n in world_sizes:
        yml, hostfile, lines = world_files(n)
        with open(os.path.join(run_dir, yml), "w", encoding="utf-8") as f:
            f.write(json.dumps({"hostfile": hostfile}) + "\n")
        with open(os.path.join(run_dir, hostfile), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        worlds[str(n)] = {"file": yml, "config": {"hostfile": hostfile}, "hostfile": hostfile, "hostfile_lines": lines}
    return worlds


# ----------------------------------------------------------------------------------------------
# Calling NeoX
# ----------------------------------------------------------------------------------------------


class _ErrorRecords(logging.Handler):
    """Keeps the messages of ERROR (and worse) log records."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(first_line(record.getMessage()))


def _silence_fds() -> None:
    """Send this process's stdout and stderr (file descriptors and Python objects) to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115


def from_ymls(paths: list[str]) -> dict[str, Any]:
    """Call NeoX's ``NeoXArgs.from_ymls(paths)`` (in a forked child) and describe the outcome."""
    _silence_fds()
    handler = _ErrorRecords()
    root = logging.getLogger()
    root.addHandler(handler)
    from megatron.neox_arguments import NeoXArgs

    try:
        args = NeoXArgs.from_ymls(paths)
    except BaseException as err:  # noqa: BLE001 -- any refusal is the result
        return {
            "accepted": False,
            "error": {"type": type(err).__name__, "message": first_line(str(err)), "logged_errors": handler.messages},
        }
    values = {name: jsonable(getattr(args, name, None)) for name in RECORDED}
    return {
        "accepted": True,
        "neox": values,
        "config_files_read": sorted(args.config_files),
        "logged_errors": handler.messages,
    }


def from_ymls_subprocess(job: tuple[list[str], list[str]]) -> dict[str, Any]:
    """``from_ymls`` in a fresh interpreter (``--isolation subprocess``): slower, nothing inherited."""
    import subprocess

    import_paths, paths = job
    code = (
        "import json, os, sys; import neox_config_sweep as s; "
        "r = s.from_ymls(sys.argv[1:]); out = os.fdopen({fd}, 'w'); out.write(json.dumps(r)); out.close()"
    )
    read_fd, write_fd = os.pipe()
    code = code.replace("{fd}", str(write_fd))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), *import_paths])}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *paths],
        pass_fds=(write_fd,),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        text = f.read()
    proc.wait()
    if not text:
        die(f"the NeoX call for {' '.join(paths)} died (exit {proc.returncode}) without a result")
    return dict(json.loads(text))


def import_neox(neox_dir: str) -> None:
    """Import NeoXArgs once in this (parent) process, quietly, so forked children start warm."""
    sys.path.insert(0, neox_dir)
    saved_out, saved_err = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        from megatron.neox_arguments import NeoXArgs  # noqa: F401
    except Exception as err:  # noqa: BLE001
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        die(
            f"cannot import NeoX from {neox_dir}: {type(err).__name__}: {first_line(str(err))}; "
            "run this with a venv built by scripts/neox_env.sh"
        )
    finally:
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(devnull)


def stub_flash_attn(directory: str) -> str | None:
    """Put a metadata-only ``flash-attn`` distribution on ``sys.path`` if none is installed; its version, or None."""
    from importlib import metadata

    try:
        metadata.version("flash-attn")
        return None
    except metadata.PackageNotFoundError:
        pass
    info = os.path.join(directory, f"flash_attn-{FLASH_ATTN_STUB_VERSION}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(f"Metadata-Version: 2.1\nName: flash-attn\nVersion: {FLASH_ATTN_STUB_VERSION}\n")
    sys.path.insert(0, directory)
    return FLASH_ATTN_STUB_VERSION


def sweep(neox_dir: str, world_sizes: Sequence[int], jobs: int, isolation: str = "fork") -> dict[str, Any]:
    """Run every pairing at every world size; return the fixture content (without commit/versions)."""
    models = model_configs(neox_dir)
    if not models:
        die(f"no model configs found under {neox_dir}/configs")
    work = [(m, n, pairing_files(m, n)) for m in models for n in world_sizes]
    configs = {
        rel: config_record(neox_dir, rel) for _m, _n, files in work for rel in files if rel.startswith("configs/")
    }
    home = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="neox_sweep_") as run_dir:
        worlds = prepare_run_dir(neox_dir, run_dir, world_sizes)
        os.chdir(run_dir)
        stub_dir = os.path.join(run_dir, "_stubs")
        stub = stub_flash_attn(stub_dir)
        if isolation == "subprocess":
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=jobs) as threads:
                results = list(
                    threads.map(
                        from_ymls_subprocess,
                        [([neox_dir, *([stub_dir] if stub else [])], files) for _m, _n, files in work],
                    )
                )
        else:
            import_neox(neox_dir)
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(processes=jobs, maxtasksperchild=1) as pool:
                results = pool.map(from_ymls, [files for _m, _n, files in work], chunksize=1)
        os.chdir(home)  # the run directory is removed next (importing torch from a removed cwd fails)
    pairings: dict[str, Any] = {}
    for (model, n, files), result in zip(work, results):
        pairings[f"{model}@{n}"] = {"model": model, "world_size": n, "files": files, **result}
    environment = {"flash_attn": f"metadata-only stub {stub} (flash-attn is not installed)" if stub else "installed"}
    return {
        "configs": configs,
        "worlds": worlds,
        "pairings": pairings,
        "summary": summarize(pairings),
        "environment": environment,
    }


def summarize(pairings: dict[str, Any]) -> dict[str, Any]:
    """Counts: pairings, accepted, refused, and refusals per exception type and first line."""
    refused: dict[str, int] = {}
    for p in pairings.values():
        if not p["accepted"]:
            key = f"{p['error']['type']}: {p['error']['message']}"
            refused[key] = refused.get(key, 0) + 1
    accepted = sum(1 for p in pairings.values() if p["accepted"])
    return {"pairings": len(pairings), "accepted": accepted, "refused": len(pairings) - accepted, "refusals": refused}


def versions() -> dict[str, str]:
    """Versions of the libraries NeoX ran with."""
    import deepspeed
    import torch

    return {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "python": platform.python_version()}


def run_one(neox_dir: str, paths: list[str]) -> int:
    """``--one``: from_ymls on ``paths`` in this process (it is fresh), the outcome as JSON on stdout."""
    with tempfile.TemporaryDirectory(prefix="neox_sweep_one_") as stubs:
        stub_flash_attn(os.path.join(stubs, "_stubs"))
        sys.path.insert(0, neox_dir)
        stdout = os.dup(1)
        result = from_ymls(list(paths))
        os.write(stdout, (json.dumps(result, sort_keys=True) + "\n").encode("utf-8"))
    return 0


def run_batch(neox_dir: str, jobs_path: str, out: str, jobs: int) -> int:
    """``--batch JOBS.json OUT.json``: from_ymls once per entry of JOBS.json (``{key: [config files]}``, paths
    relative to the current directory), each in a child forked after importing NeoX once; writes
    ``{key: outcome}`` (the records of the sweep) to OUT.json. The tests use it to judge many pairings, and to
    load the configs ``plan --write-config`` wrote, with one NeoX process."""
    with open(jobs_path, encoding="utf-8") as f:
        work: dict[str, list[str]] = json.load(f)
    with tempfile.TemporaryDirectory(prefix="neox_sweep_batch_") as stubs:
        stub_flash_attn(os.path.join(stubs, "_stubs"))
        import_neox(neox_dir)
        keys = sorted(work)
        with multiprocessing.get_context("fork").Pool(processes=jobs, maxtasksperchild=1) as pool:
            results = pool.map(from_ymls, [work[k] for k in keys], chunksize=1)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(dict(zip(keys, results)), f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "out", nargs="?", help="where to write the JSON (e.g. tests/fixtures/neox/shipped_configs.json)"
    )
    parser.add_argument(
        "--one",
        nargs="+",
        metavar="CONFIG.yml",
        help="instead of the sweep: call from_ymls on these "
        "files (relative to the current directory) once and print the outcome as JSON",
    )
    parser.add_argument(
        "--batch",
        metavar="JOBS.json",
        help="instead of the sweep: from_ymls on each entry of "
        "JOBS.json ({key: [config files]}, relative to the current directory); OUT gets {key: outcome}",
    )
    parser.add_argument("--neox-dir", default=os.environ.get("NEOX_DIR"), help="GPT-NeoX checkout (default $NEOX_DIR)")
    parser.add_argument("--neox-commit", default="unknown", help="the checkout's commit, recorded in the output")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=list(WORLD_SIZES))
    parser.add_argument(
        "--isolation",
        choices=("fork", "subprocess"),
        default="fork",
        help="fork: each call in a child forked after importing NeoX once (fast); subprocess: each "
        "call in a fresh interpreter (slow; the same results)",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel NeoX calls")
    args = parser.parse_args(argv)
    if not args.neox_dir or not os.path.isfile(
        os.path.join(args.neox_dir, "megatron", "neox_arguments", "arguments.py")
    ):
        die("give the GPT-NeoX checkout with --neox-dir or $NEOX_DIR (megatron/neox_arguments/arguments.py not found)")
    neox_dir = os.path.abspath(args.neox_dir)
    os.environ.pop("DLTS_HOSTFILE", None)  # NeoX reads it at import: the world file must be the only source
    if os.path.exists(DEFAULT_DLTS_HOSTFILE):
        die(f"{DEFAULT_DLTS_HOSTFILE} exists on this machine and NeoX would count its GPUs; run elsewhere")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if args.one:
        return run_one(neox_dir, args.one)
    if args.batch:
        if not args.out:
            die("--batch JOBS.json: give the output path OUT.json")
        return run_batch(neox_dir, args.batch, args.out, max(1, args.jobs))
    if not args.out:
        die("give the output path (e.g. tests/fixtures/neox/shipped_configs.json), or --one CONFIG.yml ...")
    out = os.path.abspath(args.out)
    result = sweep(neox_dir, args.world_sizes, max(1, args.jobs), args.isolation)
    result.update(
        {
            "generator": "scripts/neox_config_sweep.py",
            "regenerate": "NEOX_DIR=<gpt-neox checkout> <venv from scripts/neox_env.sh>/bin/python "
            "scripts/neox_config_sweep.py tests/fixtures/neox/shipped_configs.json --neox-commit <sha>",
            "neox_commit": args.neox_commit,
            "world_sizes": list(args.world_sizes),
            "versions": versions(),
            "pairing_rule": (
                f"model config (sets num_layers), + {LLAMA_TRAIN_CONFIG} for {LLAMA_DIR}*, + {LOCAL_SETUP}, "
                "+ world_N.yml (hostfile: hostfile_N); paths relative to the run directory, where "
                "configs/ is NeoX's configs/"
            ),
        }
    )
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    s = result["summary"]
    print(f"{s['pairings']} pairings: {s['accepted']} accepted, {s['refused']} refused by NeoX; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
