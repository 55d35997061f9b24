"""Detect the installed framework version without importing it (no torch import)."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Sequence

from neox_epoch.errors import ConfigError

log = logging.getLogger(__name__)

#: megatron-core versions whose data arithmetic this project's tests check against the real builder
VERIFIED_MCORE_VERSIONS = ("0.10.0", "0.16.1", "0.19.2")


def _package_info_version(path: str) -> str | None:
    """``MAJOR.MINOR.PATCH[PRE_RELEASE]`` read from a megatron/core/package_info.py as text (no import)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    parts = {}
    for key in ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE"):
        m = re.search(rf"^{key}\s*=\s*['\"]?([0-9A-Za-z.]*)['\"]?\s*$", text, re.MULTILINE)
        if m is None and key != "PRE_RELEASE":
            return None
        parts[key] = m.group(1) if m else ""
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts['PRE_RELEASE']}"


def megatron_core_source(paths: Sequence[str] | None = None) -> tuple[str, str] | None:
    """(version, where) of the megatron-core that ``import megatron.core`` would load, without importing it.

    The first ``megatron/core`` on ``sys.path`` wins, as for the import: a Megatron-LM checkout on PYTHONPATH
    shadows the installed wheel. Its ``package_info.py`` gives the version; package metadata is the fallback.
    """
    for entry in sys.path if paths is None else paths:
        base = os.path.join(entry or os.getcwd(), "megatron", "core")
        if os.path.isfile(os.path.join(base, "__init__.py")):
            version = _package_info_version(os.path.join(base, "package_info.py"))
            if version:
                return version, os.path.join(entry or ".", "megatron", "core", "package_info.py")
    from importlib import metadata  # here, not at the top: it imports email, csv and zipfile (~25 ms a plan)

    try:
        return metadata.version("megatron-core"), "the installed megatron-core package"
    except metadata.PackageNotFoundError:
        return None


def megatron_core_version() -> str | None:
    """The version of the megatron-core that would be imported (a checkout on the path first), or None."""
    found = megatron_core_source()
    return found[0] if found else None


def neox_version(neox_dir: str | None = None) -> str:
    """GPT-NeoX has no package version: the short commit of NEOX_DIR if it is a git checkout, else 'unknown'."""
    root = neox_dir or os.environ.get("NEOX_DIR")
    if root and os.path.isdir(os.path.join(root, ".git")):
        import subprocess  # only for a GPT-NeoX checkout

        try:
            out = subprocess.run(
                ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
            )
            if out.returncode == 0:
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return "ea7aefd8"


def version_to_mirror(given: str | None, force: bool = False) -> str:
    """The megatron-core version to mirror: given, or the one ``import megatron.core`` would load (a
    Megatron-LM checkout on PYTHONPATH first, else the installed package); unverified versions need
    ``--force-version``."""
    where = "--framework-version"
    version = given
    if not version:
        found = megatron_core_source()
        if found is None:
            raise ConfigError(
                "--framework-version: no megatron-core is installed or on PYTHONPATH; say which version "
                "to mirror, e.g. --framework-version 0.16.1"
            )
        version, where = found
    if version not in VERIFIED_MCORE_VERSIONS and not force:
        raise ConfigError(
            f"megatron-core {version} (from {where}): its data arithmetic is not verified against a real build by "
            f"this project (verified: {', '.join(VERIFIED_MCORE_VERSIONS)}); pass --force-version to plan it "
            "with the rules of its version range, or --framework-version with a verified version"
        )
    if version not in VERIFIED_MCORE_VERSIONS:
        log.warning(
            "megatron-core %s is not verified against a real build here; planned with the rules of its "
            "version range (--force-version)",
            version,
        )
    return str(version)
