"""The self-descriptions megatron caches carry: megatron-core ``description.txt`` and legacy ``.dsc``.

megatron-core writes ``json.dumps(unique_identifiers, indent=4)`` and names the files after its md5; a
BlendedDataset's description embeds the descriptions of its GPTDatasets, so the children's file names
can be recomputed from it. Legacy Megatron-LM writes a few ``Key value`` lines, also md5-named.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError, FileProblem
from neox_epoch.util.inputs import open_input

#: largest description read (a blend of many sources is a few hundred kB)
MAX_DESCRIPTION_BYTES = 64 << 20


def md5_text(text: str) -> str:
    import hashlib  # (megatron's descriptions only: 3 ms of a NeoX audit's start)

    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def child_digest(child: dict[str, Any]) -> str:
    """The md5 megatron-core names a GPTDataset's files with, from its (embedded) identifiers."""
    return md5_text(json.dumps(child, indent=4))


def _read_text(path: str) -> str:
    try:
        with open_input(path, "description", error=ConfigError) as f:
            raw = f.read(MAX_DESCRIPTION_BYTES + 1)
    except ConfigError as err:
        raise FileProblem(path, "read", "a readable description (a regular file)", str(err).split(": ", 1)[1]) from None
    except OSError as err:
        raise FileProblem(
            path, "read", "a readable description", f"{type(err).__name__}: {err.strerror or err}"
        ) from None
    if len(raw) > MAX_DESCRIPTION_BYTES:
        raise FileProblem(path, "size", f"at most {MAX_DESCRIPTION_BYTES} bytes", "a larger file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileProblem(path, "encoding", "UTF-8 text", f"undecodable bytes ({err.reason})") from None


@dataclass(frozen=True)
class Description:
    """A parsed description file and the md5 of its text (the file name's, unless it was edited)."""

    digest: str  # md5 of the text.
    fields: dict[str, Any]
    """megatron-core: the JSON object; legacy: ``{"data_prefix", "name", "num_samples", "seq_length",
    "seed", "split"}``."""


def read_mcore_description(path: str) -> Description:
    text = _read_text(path)
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as err:
        raise FileProblem(
            path,
            "description",
            "the JSON megatron-core writes",
            f"invalid JSON ({err.msg} at line {err.lineno})",
            "the file is damaged: delete the cache files with this hash so megatron-core rebuilds them",
        ) from None
    if not isinstance(fields, dict):
        raise FileProblem(path, "description", "a JSON object", type(fields).__name__)
    return Description(digest=md5_text(text), fields=fields)


_LEGACY_KEYS = {
    "Data prefix": "data_prefix",
    "Dataset name": "name",
    "Number of samples": "num_samples",
    "Sequence length": "seq_length",
    "Random seed": "seed",
    "Split": "split",
}


def read_legacy_description(path: str) -> Description:
    text = _read_text(path)
    fields: dict[str, Any] = {}
    for line in text.splitlines():
        for key, name in _LEGACY_KEYS.items():
            if line.startswith(key + " "):
                fields[name] = line[len(key) + 1 :]
    for name in ("num_samples", "seq_length", "seed"):
        value = fields.get(name, "None")
        if value != "None" and not re.fullmatch(r"-?\d+", value):
            raise FileProblem(path, f"description field {name}", "an integer", repr(value))
        if name in fields:
            fields[name] = None if value == "None" else int(value)
    if "seq_length" not in fields:
        raise FileProblem(
            path, "description", "legacy Megatron-LM lines such as 'Sequence length 2048'", "no 'Sequence length' line"
        )
    return Description(digest=md5_text(text), fields=fields)


#: the two forms of a GPTDataset description's ``tokenizer`` entry: (which Megatron-LM builds it, the form)
_FORMS = {
    "legacy": ("0.16.1", "its legacy tokenizer's: class the bare name, tokenizer_path a list"),
    "core": ("0.19", "megatron-core's tokenizer's: class module-qualified, tokenizer_path a string or null"),
}


def tokenizer_form_note(fields: dict[str, Any]) -> str | None:
    """Why another Megatron-LM version does not reuse this cache: the description's ``tokenizer`` entry (part of
    the md5 in the file names) has one version's form; None when it has neither (no tokenizer recorded)."""
    tokenizer = fields.get("tokenizer")
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("class"), str):
        return None
    name, path = tokenizer["class"], tokenizer.get("tokenizer_path")
    if "." not in name and isinstance(path, list):
        (built, form), (other, other_form) = _FORMS["legacy"], _FORMS["core"]
    elif "." in name and not isinstance(path, list):
        (built, form), (other, other_form) = _FORMS["core"], _FORMS["legacy"]
    else:
        return None
    return (
        f"tokenizer {name!r} is described as Megatron-LM {built} describes it ({form}); Megatron-LM {other} "
        f"writes {other_form}, so its description's md5 (the hash in these file names) differs and a "
        f"Megatron-LM {other} run does not find this cache: it builds a new one"
    )
