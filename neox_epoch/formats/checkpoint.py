"""What a checkpoint says about the run that saved it, read without torch and without its weights.

GPT-NeoX saves through DeepSpeed: ``{save}/latest`` names the tag (``global_step{N}``), and
``{save}/{tag}/mp_rank_00_model_states.pt`` holds NeoX's client state (``iteration``, a few model ``args``)
next to DeepSpeed's own keys (``dp_world_size``, ``mp_world_size``, ``ds_config``); NeoX also copies the
run's config files into ``{save}/{tag}/configs/``. Megatron-LM writes
``{save}/latest_checkpointed_iteration.txt`` and ``iter_{N:07d}/``, with its ``args`` (an
``argparse.Namespace``: ``consumed_train_samples``, ``global_batch_size``, ...) in ``common.pt``
(``torch_dist`` format) or ``mp_rank_00/model_optim_rng.pt`` (``torch`` format).

``.pt`` files are zip archives whose ``data.pkl`` is a pickle that refers to tensor storages stored beside
it. :func:`read_pt` unpickles ``data.pkl`` alone: plain Python values (dicts, lists, numbers, strings,
``OrderedDict``, ``argparse.Namespace``) come back as themselves, anything else (tensors, numpy arrays,
torch classes) as :class:`NotRead` without reading its bytes or running its code. No class outside the
allowlist is ever imported, so reading an untrusted checkpoint cannot execute code.
"""

from __future__ import annotations

import argparse
import collections
import io
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.util.inputs import JSON_BYTES, open_input

#: the file neox-epoch's hooks write into each NeoX checkpoint tag directory
STATE_NAME = "neox_epoch_state.json"
#: the DeepSpeed client-state key of the megatron-core live counters' state_dict (neox_epoch.mcore.counters)
COUNTERS_KEY = "neox_epoch_counters"
#: globals rebuilt as themselves; everything else becomes NotRead
_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("argparse", "Namespace"): argparse.Namespace,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("builtins", "complex"): complex,
}


class NotRead:
    """A value the reader did not rebuild (a tensor, an array, a torch or numpy object): ``what`` names it."""

    def __init__(self, what: str = "a tensor storage", *args: Any, **kwargs: Any) -> None:
        self.what = what

    def __call__(self, *args: Any, **kwargs: Any) -> NotRead:
        return NotRead(self.what)

    def __setstate__(self, state: Any) -> None:
        """Pickle's BUILD on a value that was not rebuilt: ignored."""

    def __repr__(self) -> str:
        return f"<{self.what}: not read>"


class _ArgsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _ALLOWED.get((module, name)) or NotRead(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        return NotRead("a tensor storage")


def read_pt(path: str) -> Any:
    """The object saved in a zip-format ``torch.save`` file, without tensors (see the module docstring).

    The pickle is read from memory after its announced size was checked against the file's: a damaged pickle that
    announces more bytes than the file holds (a length field of 2^62) is one error, never an allocation of it."""
    try:
        with open_input(path, "checkpoint file (torch.save)") as raw, zipfile.ZipFile(raw) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(names) != 1:
                raise ConfigError(
                    f"{path}: a torch.save zip archive has one data.pkl, found {len(names)}; is this a checkpoint file?"
                )
            info = archive.getinfo(names[0])
            size = os.fstat(raw.fileno()).st_size
            if info.compress_type == zipfile.ZIP_STORED and info.file_size > size:
                raise ConfigError(
                    f"{path}: its data.pkl announces {info.file_size} bytes, the file holds {size}; the "
                    "file is truncated or damaged: copy it again from the save"
                )
            data = archive.read(names[0])
        return _ArgsOnly(io.BytesIO(data)).load()
    except zipfile.BadZipFile:  # (a missing file, a directory or a pipe: open_input's one line)
        raise ConfigError(
            f"{path}: not a zip-format torch.save file (saved by torch < 1.6 or with "
            "_use_new_zipfile_serialization=False); reading it needs torch: load it with torch.load and "
            "re-save it, or give the run's JSONL record instead"
        ) from None
    except (MemoryError, OverflowError):
        raise ConfigError(
            f"{path}: its data.pkl announces an object larger than the file ({os.path.getsize(path)} "
            "bytes); the file is damaged or not a checkpoint: copy it again from the save"
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(
            f"{path}: its data.pkl cannot be read ({err}); the file is truncated or not a checkpoint"
        ) from None


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint directory says about the run that saved it."""

    framework: str
    """"neox" (DeepSpeed's layout), "megatron-core" (DeepSpeed's layout with the megatron-core counters' state
    in its client state) or "megatron" (Megatron-LM's)."""
    directory: str
    """The tag directory (``global_step{N}`` or ``iter_{N:07d}``)."""
    iteration: int
    """Iterations finished when it was saved (the resume starts after it)."""
    values: dict[str, Any] = field(default_factory=dict)
    """What it recorded of the run: DeepSpeed's ``dp_world_size``/``ds_config`` and NeoX's ``args``, or
    Megatron-LM's ``args`` as a dict."""
    config_files: dict[str, str] = field(default_factory=dict)
    """NeoX: the run's config files as copied into ``configs/`` (name -> text)."""
    state: dict[str, Any] | None = None
    """neox-epoch's own record (``neox_epoch_state.json``), when the hooks saved one."""


def _read_text(path: str, what: str, fix: str) -> str:
    """A small text file of a checkpoint, stripped; ConfigError naming ``what`` it is and ``fix`` when it cannot be
    read as UTF-8 text."""
    if os.path.isdir(path):
        raise ConfigError(f"{path}: a directory where {what} belongs (a file); {fix}")
    try:
        with open_input(path, "checkpoint file", JSON_BYTES, encoding="utf-8") as f:
            return str(f.read()).strip()
    except UnicodeDecodeError as err:
        found = f"byte {err.object[err.start : err.start + 1]!r} at offset {err.start} ({err.reason})"
        raise ConfigError(f"{path}: {what} is not UTF-8 text: {found}; the file is damaged: {fix}") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read {what} ({err.strerror or err}); {fix}") from None


def iteration_of(value: Any, where: str) -> int:
    """A saved iteration: a whole number >= 0 (iterations finished; Megatron-LM's read_metadata refuses a negative
    one: 'error parsing metadata file')."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{where}: iteration is {value!r}, expected a whole number >= 0 (the iterations finished "
            "when it was saved); the checkpoint is damaged or was edited: use another save"
        )
    if value < 0:
        raise ConfigError(
            f"{where}: iteration is {value}, expected a whole number >= 0 (Megatron-LM refuses a "
            "negative one: 'error parsing metadata file'); the checkpoint is damaged or was edited: "
            "use another save"
        )
    return value


_LATEST_FIX = "write the tag of the last complete save (global_stepN, a directory beside it) into it"
_TRACKER_FIX = "write the iteration of the last complete save (the N of iter_NNNNNNN beside it) or 'release' into it"


def _megatron_tag(marker: str) -> str:
    """The tag ``latest_checkpointed_iteration.txt`` names, read as Megatron-LM's read_metadata reads it."""
    text = _read_text(marker, "Megatron-LM's latest_checkpointed_iteration.txt", _TRACKER_FIX)
    if text == "release":
        return "release"
    try:
        iteration = int(text)
    except ValueError:
        raise ConfigError(
            f"{marker}: holds {text[:40]!r}, expected an iteration (a whole number >= 0) or 'release' "
            f"(Megatron-LM exits on it: 'Invalid metadata file'); {_TRACKER_FIX}"
        ) from None
    return f"iter_{iteration_of(iteration, marker):07d}"


def _tag_dir(path: str) -> tuple[str, str]:
    """(framework, tag directory) for a save directory or a tag directory."""
    if os.path.isfile(os.path.join(path, "latest")):
        return "neox", os.path.join(
            path, _read_text(os.path.join(path, "latest"), "DeepSpeed's 'latest' file", _LATEST_FIX)
        )
    marker = os.path.join(path, "latest_checkpointed_iteration.txt")
    if os.path.isfile(marker):
        return "megatron", os.path.join(path, _megatron_tag(marker))
    base = os.path.basename(os.path.normpath(path))
    if base.startswith("global_step"):
        return "neox", path
    if base.startswith("iter_") or base == "release":
        return "megatron", path
    raise ConfigError(
        f"{path}: not a checkpoint directory: expected DeepSpeed's 'latest' file (GPT-NeoX), Megatron-LM's "
        "latest_checkpointed_iteration.txt, or a tag directory global_stepN / iter_NNNNNNN"
    )


def read_checkpoint(path: str) -> Checkpoint:
    """Read the checkpoint at ``path`` (a save directory or one of its tags) without loading its weights."""
    if not os.path.isdir(path):
        raise ConfigError(f"{path}: not a directory; give the checkpoint directory (--save/--load) or a tag inside it")
    framework, tag = _tag_dir(path)
    if not os.path.isdir(tag):
        raise ConfigError(
            f"{path}: names checkpoint {os.path.basename(tag)}, which is missing; the save was cut off or moved"
        )
    return _read_neox(tag) if framework == "neox" else _read_megatron(tag)


def _read_neox(tag: str) -> Checkpoint:
    states = os.path.join(tag, "mp_rank_00_model_states.pt")
    saved = read_pt(states)
    if not isinstance(saved, dict) or "iteration" not in saved:
        raise ConfigError(f"{states}: no 'iteration' in it; not a GPT-NeoX checkpoint")
    keep = (
        "iteration",
        "args",
        "dp_world_size",
        "mp_world_size",
        "ds_config",
        "ds_version",
        "global_steps",
        "global_samples",
        COUNTERS_KEY,
    )
    values = {k: saved[k] for k in keep if k in saved}
    configs = os.path.join(tag, "configs")
    fix = "restore it from the run's config files or delete configs/ to compare without them"
    files = (
        {n: _read_text(os.path.join(configs, n), "a config file NeoX copied", fix) for n in sorted(os.listdir(configs))}
        if os.path.isdir(configs)
        else {}
    )
    framework = "megatron-core" if COUNTERS_KEY in saved else "neox"  # a megatron-core loop with the counters
    return Checkpoint(framework, tag, iteration_of(saved["iteration"], states), values, files, _state(tag))


def _state(tag: str) -> Any:
    """neox-epoch's ``neox_epoch_state.json`` as JSON (None when absent); checked further by neox.resume_state."""
    import json

    path = os.path.join(tag, STATE_NAME)
    if not os.path.isfile(path):
        return None
    fix = "restore it from the checkpoint's copy, or delete it to resume as stock NeoX"
    try:
        return json.loads(_read_text(path, "neox-epoch's state", fix))
    except ValueError as err:
        raise ConfigError(
            f"{path}: not a neox-epoch state (not JSON: {err}); it was cut off or edited: {fix}"
        ) from None


def _read_megatron(tag: str) -> Checkpoint:
    for rel in ("common.pt", os.path.join("mp_rank_00", "model_optim_rng.pt")):
        if os.path.isfile(os.path.join(tag, rel)):
            saved = read_pt(os.path.join(tag, rel))
            break
    else:
        raise ConfigError(
            f"{tag}: neither common.pt (torch_dist) nor mp_rank_00/model_optim_rng.pt (torch) is there; "
            "not a Megatron-LM checkpoint"
        )
    args = saved.get("args") if isinstance(saved, dict) else None
    if not isinstance(args, argparse.Namespace):
        raise ConfigError(
            f"{tag}: no 'args' saved with it (saved by another tool?); give the run's JSONL record instead"
        )
    iteration = saved.get("iteration", getattr(args, "iteration", 0))
    return Checkpoint("megatron", tag, iteration_of(iteration, tag), dict(vars(args)))
