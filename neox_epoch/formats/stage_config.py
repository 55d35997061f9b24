"""What a config says about data stages: an ordered list of stages (a name and per-source pass targets, or weights
with a length in iterations or samples) and ``max_passes``, validated once when built (:class:`StagesConfig`).
The arithmetic over them is :mod:`neox_epoch.plan.stages`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neox_epoch.errors import ConfigError, did_you_mean

_STAGE_KEYS = ("name", "passes", "weights", "iterations", "samples")


def number(where: str, value: Any, *, positive: bool) -> float:
    """A finite real number (bool refused), > 0 when ``positive`` else >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{where}: expected a number {'>' if positive else '>='} 0, got {value!r}")
    return float(value)


def count(where: str, value: Any) -> int:
    """A positive integer (bool and float refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    return value


def per_source(where: str, value: Any, *, positive: bool) -> dict[str, float]:
    if not isinstance(value, Mapping) or not value:
        raise ConfigError(f"{where}: expected a non-empty mapping of source name to number, got {value!r}")
    out = {}
    for source, raw in value.items():
        if not isinstance(source, str) or not source:
            raise ConfigError(f"{where}: source names must be non-empty strings, got {source!r}")
        out[source] = number(f"{where}.{source}", raw, positive=positive)
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Stage:
    """One stage: per-source pass targets, or weights with a length in iterations or samples."""

    name: str
    """Shown in tables and errors; unique within a plan."""
    passes: Mapping[str, float] | None = None
    """Passes over each source this stage draws (0.5 = half of its samples per epoch)."""
    weights: Mapping[str, float] | None = None
    """Relative share of each source in the stage's samples (needs ``iterations`` or ``samples``)."""
    iterations: int | None = None
    """Length of a weights stage in global batches."""
    samples: int | None = None
    """Length of a weights stage in samples (rounded up to whole global batches)."""

    def __post_init__(self) -> None:
        where = f"stage {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"stage name: expected a non-empty string, got {self.name!r}")
        if (self.passes is None) == (self.weights is None):
            raise ConfigError(f"{where}: give exactly one of 'passes' (per-source pass targets) or 'weights'")
        if self.passes is not None:
            if self.iterations is not None or self.samples is not None:
                raise ConfigError(
                    f"{where}: 'passes' fixes the stage's length; drop 'iterations'/'samples' or use 'weights'"
                )
            passes = per_source(f"{where}.passes", self.passes, positive=False)
            if not any(passes.values()):
                raise ConfigError(f"{where}.passes: every target is 0; give at least one source a pass target > 0")
            object.__setattr__(self, "passes", passes)
            return
        object.__setattr__(self, "weights", per_source(f"{where}.weights", self.weights, positive=True))
        if (self.iterations is None) == (self.samples is None):
            raise ConfigError(f"{where}: a weights stage needs exactly one of 'iterations' or 'samples'")
        if self.iterations is not None:
            count(f"{where}.iterations", self.iterations)
        if self.samples is not None:
            count(f"{where}.samples", self.samples)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(self.passes or self.weights or ())

    @classmethod
    def from_mapping(cls, data: Any, where: str = "stage") -> Stage:
        """Build from a config mapping, refusing unknown keys by name."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping with keys {', '.join(_STAGE_KEYS)}, got {data!r}")
        for key in data:
            if key not in _STAGE_KEYS:
                raise ConfigError(f"{where}: unknown key {key!r}{did_you_mean(str(key), _STAGE_KEYS)}")
        if "name" not in data:
            raise ConfigError(f"{where}: missing 'name'")
        return cls(**{key: data[key] for key in _STAGE_KEYS if key in data})

    def to_mapping(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        for key in ("passes", "weights", "iterations", "samples"):
            value = getattr(self, key)
            if value is not None:
                out[key] = dict(value) if isinstance(value, Mapping) else value
        return out


_DECAY_KEYS = ("from_stage", "until_stage")


@dataclass(frozen=True, kw_only=True, slots=True)
class StageDecay:
    """Where the learning-rate decay sits on the stage boundaries (the warmup happens once, at the run's start).

    ``{"from_stage": "s3"}``: the learning rate stays at its peak until stage s3 starts, then decays until the end
    (a WSD schedule: megatron-core only). ``{"until_stage": "s2"}``: the decay ends where stage s2 ends. Neither:
    the decay ends with the last stage. Not part of the data fingerprint (it changes no sample)."""

    from_stage: str | None = None
    """The decay starts at this stage's first iteration (None: right after the warmup)."""
    until_stage: str | None = None
    """The decay ends at this stage's last iteration (None: the last stage's)."""

    def __post_init__(self) -> None:
        for key in _DECAY_KEYS:
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"decay.{key}: expected a stage name (a non-empty string), got {value!r}")

    @classmethod
    def from_mapping(cls, data: Any) -> StageDecay:
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"decay: expected a mapping with keys {', '.join(_DECAY_KEYS)} (stage names), got "
                f'{data!r}; e.g. {{"from_stage": "s3"}}'
            )
        for key in data:
            if key not in _DECAY_KEYS:
                raise ConfigError(
                    f"decay: unknown key {key!r}{did_you_mean(str(key), _DECAY_KEYS)}; known keys: "
                    f"{', '.join(_DECAY_KEYS)}"
                )
        return cls(**{key: data[key] for key in _DECAY_KEYS if key in data})

    def to_mapping(self) -> dict[str, str]:
        return {key: getattr(self, key) for key in _DECAY_KEYS if getattr(self, key) is not None}


@dataclass(frozen=True, kw_only=True, slots=True)
class StagesConfig:
    """An ordered stage plan and its repetition cap."""

    stages: tuple[Stage, ...]
    max_passes: float | Mapping[str, float] | None = None
    """Cap on a source's total passes over all stages: one number for every source, or per source."""
    decay: StageDecay | None = None
    """Where the learning-rate decay starts and ends, by stage (None: the framework's own schedule keys)."""

    def __post_init__(self) -> None:
        if not self.stages:
            raise ConfigError("stages: expected at least one stage")
        names = [stage.name for stage in self.stages]
        for name in names:
            if names.count(name) > 1:
                raise ConfigError(
                    f"stages: the name {name!r} is used {names.count(name)} times; stage names are unique"
                )
        object.__setattr__(self, "stages", tuple(self.stages))
        if isinstance(self.max_passes, Mapping):
            object.__setattr__(self, "max_passes", per_source("max_passes", self.max_passes, positive=True))
        elif self.max_passes is not None:
            object.__setattr__(self, "max_passes", number("max_passes", self.max_passes, positive=True))
        if isinstance(self.decay, Mapping):
            object.__setattr__(self, "decay", StageDecay.from_mapping(self.decay))
        if self.decay is not None:
            self.check_decay(self.decay, names)

    @staticmethod
    def check_decay(decay: StageDecay, names: list[str]) -> None:
        for key in _DECAY_KEYS:
            value = getattr(decay, key)
            if value is not None and value not in names:
                raise ConfigError(
                    f"decay.{key}: {value!r} is not a stage{did_you_mean(value, names)}; the stages are "
                    f"{', '.join(names)}"
                )
        if (
            decay.from_stage is not None
            and decay.until_stage is not None
            and names.index(decay.from_stage) > names.index(decay.until_stage)
        ):
            raise ConfigError(
                f"decay: from_stage {decay.from_stage!r} comes after until_stage {decay.until_stage!r}; "
                "the decay must start at or before the stage it ends with"
            )

    @classmethod
    def from_mapping(cls, data: Any) -> StagesConfig:
        """From ``{"stages": [...], "max_passes": 2 | {source: cap}, "decay": {"from_stage": name}}``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"stage plan: expected a mapping with 'stages' (and 'max_passes'), got {data!r}")
        keys = ("stages", "max_passes", "decay")
        for key in data:
            if key not in keys:
                raise ConfigError(f"stage plan: unknown key {key!r}{did_you_mean(str(key), keys)}")
        stages = data.get("stages")
        if not isinstance(stages, Sequence) or isinstance(stages, (str, bytes)):
            raise ConfigError(f"stages: expected a list of stages, got {stages!r}")
        return cls(
            stages=tuple(Stage.from_mapping(s, where=f"stages[{i}]") for i, s in enumerate(stages)),
            max_passes=data.get("max_passes"),
            decay=StageDecay.from_mapping(data["decay"]) if data.get("decay") is not None else None,
        )

    def to_mapping(self) -> dict[str, Any]:
        """The stages and the cap (what the data fingerprint holds; the decay is :attr:`decay`)."""
        cap = dict(self.max_passes) if isinstance(self.max_passes, Mapping) else self.max_passes
        return {"stages": [stage.to_mapping() for stage in self.stages], "max_passes": cap}

    def cap_of(self, source: str) -> float | None:
        if isinstance(self.max_passes, Mapping):
            return self.max_passes.get(source)
        return self.max_passes
