"""What a plan is: per source and split, plus run-level numbers, warnings and (exact mode) settings.

The result types of :mod:`neox_epoch.plan.planner`, kept apart so that the modules that reshape a plan
(:mod:`neox_epoch.plan.repeated`, the renderers) need not import the planner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neox_epoch.plan.inputs import PlanWarning


@dataclass(frozen=True)
class SourcePlan:
    """One source in one split: what is built and what training draws. JSON keys are these names."""

    name: str
    prefix: str
    split: str
    documents: int
    document_range: tuple[int, int]
    tokens: int
    samples_per_epoch: int
    samples_requested: int | None
    epochs_built: int
    samples_built: int
    length: int
    separate_final_epoch: bool
    samples_drawn: int
    passes: float
    tokens_unseen: int
    tokens_unseen_exact: bool
    target_samples: int | None = None
    formula: str = ""
    copies: int = 1
    samples_distinct: int | None = None


@dataclass(frozen=True)
class SplitBlend:
    """The top-level blend of one split (absent for a direct dataset)."""

    split: str
    size: int | None
    weights: tuple[float, ...] | None
    consumed: int
    draws: tuple[int, ...]
    rule: str


@dataclass(frozen=True)
class Plan:
    """The result: per source and split, plus run-level numbers, warnings and (exact mode) settings."""

    framework: str
    framework_version: str
    seq_length: int
    global_batch_size: int
    train_iters: int
    train_samples: int
    consumed: dict[str, int]
    sources: tuple[SourcePlan, ...]
    blends: tuple[SplitBlend, ...]
    warnings: tuple[PlanWarning, ...]
    arithmetic: tuple[str, ...]
    settings: dict[str, object] = field(default_factory=dict)
    remainder_samples: int = 0
    remainder_tokens: int = 0

    def to_json(self) -> dict[str, object]:
        """The stable JSON form documented in docs/plan.md."""
        return {
            "framework": self.framework,
            "framework_version": self.framework_version,
            "seq_length": self.seq_length,
            "global_batch_size": self.global_batch_size,
            "train_iters": self.train_iters,
            "train_samples": self.train_samples,
            "consumed_samples": dict(self.consumed),
            "warnings": [w.to_json() for w in self.warnings],
            "arithmetic": list(self.arithmetic),
            "sources": [
                {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.__dict__.items()} for s in self.sources
            ],
            "blends": [
                {k: (list(v) if isinstance(v, tuple) else v) for k, v in b.__dict__.items()} for b in self.blends
            ],
            "remainder": {"samples": self.remainder_samples, "tokens": self.remainder_tokens},
            "settings": dict(self.settings),
        }

    def planned_weights(self) -> list[float]:
        """The blend weights exact mode sets (``settings["weights"]``, a list of floats); [] when it sets none."""
        weights = self.settings.get("weights")
        return [float(w) for w in weights] if isinstance(weights, list | tuple) else []
