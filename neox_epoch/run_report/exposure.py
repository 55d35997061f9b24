"""Token-exposure histograms for the page: how many of a source's tokens were inputs 0, 1, 2, ... times.

The run log gives, per source, the samples drawn and the plan's samples_per_epoch, tokens, epochs built and
whether each epoch was shuffled on its own; not which samples were drawn. So without an audit the histogram
is *estimated from the counters*:

* epochs shuffled separately (``separate_epochs``, or one epoch built): ``k = samples // samples_per_epoch``
  passes are whole, every token seen ``k`` times; the next pass is a fraction ``f = (samples - k *
  samples_per_epoch) / samples_per_epoch`` of a shuffled epoch, so about ``f`` of the tokens are seen ``k + 1``
  times and ``1 - f`` of them ``k`` times;
* ``E > 1`` epochs shuffled together (NeoX's default): each token is in ``E`` samples of the
  ``samples_built`` shuffled ones and each is drawn with probability ``p = samples / samples_built``, so a
  token's count is Binomial(E, p): about ``C(E, j) p^j (1-p)^(E-j)`` of the tokens are seen ``j`` times.

Token counts are those fractions of ``tokens`` rounded to integers that sum to ``tokens``. The tokens that no
sample covers (fewer than seq_length per epoch) are not modelled. The exact histogram, token by token, is
``neox-epoch audit``'s: with ``--audit AUDIT.json`` (its ``--json`` output) the page draws that one instead.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from neox_epoch.run_report.log import Launch, RunLogError
from neox_epoch.run_report.series import Series
from neox_epoch.util.inputs import JSON_BYTES, open_input

ESTIMATED = "estimated from counters"
AUDIT = "exact: neox-epoch audit"


@dataclass(frozen=True)
class Histogram:
    source: str
    method: str
    """:data:`ESTIMATED` or :data:`AUDIT`."""
    tokens: tuple[tuple[int, int], ...]
    """``(times seen, tokens)``, every count from 0 to the largest."""
    derivation: str
    """How the numbers were obtained, with the arithmetic."""
    samples: int | None
    """Samples of the source the histogram is for."""

    @property
    def total(self) -> int:
        return sum(n for _, n in self.tokens)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "samples": self.samples,
            "tokens": {str(k): v for k, v in self.tokens},
            "derivation": self.derivation,
        }


#: an audit histogram up to this many times seen is drawn with every count; past it, with the counts seen only
DENSE_BINS = 4096


def _integer_split(total: int, fractions: list[float]) -> list[int]:
    """``fractions`` of ``total`` as integers summing to ``total`` (largest remainder)."""
    raw = [total * f for f in fractions]
    out = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def _binomial(n: int, j: int, p: float) -> float:
    """P(X = j) for X ~ Binomial(n, p), in logs (math.comb(n, j) overflows a float from n of about 1,030 on: a
    source shorter than a few samples is built thousands of epochs)."""
    if n <= 1000:  # (exactly as before where the float holds it)
        return math.comb(n, j) * p**j * (1 - p) ** (n - j)
    if p <= 0.0 or p >= 1.0:
        return float(j == (n if p >= 1.0 else 0))
    log = math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * math.log(p) + (n - j) * math.log1p(-p)
    return math.exp(log)


def estimate(
    source: str,
    samples: int,
    samples_per_epoch: int,
    tokens: int,
    epochs_built: int | None,
    samples_built: int | None,
    separate: bool | None,
) -> Histogram:
    """The histogram of one source from its counters and plan (see the module docstring)."""
    joint = bool(epochs_built and epochs_built > 1 and not separate and samples_built)
    if joint:
        e, built = int(epochs_built or 0), int(samples_built or 0)
        p = min(1.0, samples / built)
        fr = [_binomial(e, j, p) for j in range(e + 1)]
        counts = _integer_split(tokens, fr)
        parts = ", ".join(f"{j}: {f:.4f}" for j, f in enumerate(fr))
        how = (
            f"{e} epochs shuffled together: p = samples / samples_built = {samples:,d} / {built:,d} = {p:.6f}; "
            f"Binomial({e}, p) gives the fraction of tokens seen j times ({parts}); x {tokens:,d} tokens"
        )
        if samples > built:
            how += f"; the counters drew {samples - built:,d} samples more than were built (an index wrap)"
    else:
        k, rest = divmod(samples, samples_per_epoch) if samples_per_epoch else (0, 0)
        f = rest / samples_per_epoch if samples_per_epoch else 0.0
        fr = [0.0] * k + [1 - f, f]
        counts = _integer_split(tokens, fr)
        why = "each epoch shuffled on its own" if separate else "one epoch built"
        how = (
            f"{why}: samples / samples_per_epoch = {samples:,d} / {samples_per_epoch:,d} = {k} whole "
            f"pass{'' if k == 1 else 'es'} + {f:.6f} of a pass; {1 - f:.6f} of the {tokens:,d} tokens seen {k}x, "
            f"{f:.6f} seen {k + 1}x"
        )
    while len(counts) > 1 and counts[-1] == 0:
        counts.pop()
    return Histogram(source, ESTIMATED, tuple(enumerate(counts)), how, samples)


def estimated(series: Series, last: Launch) -> list[Histogram]:
    """Every source with tokens in the last launch's plan, at its last recorded samples."""
    out = []
    for s in series.sources:
        plan = last.source(s.name)
        p = s.last
        if plan is None or plan.tokens is None or p is None or not plan.samples_per_epoch:
            continue  # (a source shorter than one sample: every sample spans all its tokens; no histogram estimated)
        out.append(
            estimate(
                s.name,
                p.samples,
                plan.samples_per_epoch,
                plan.tokens,
                plan.epochs_built,
                plan.samples_built,
                plan.separate_epochs,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------------
# the audit's exact histograms


def read_audit(path: str) -> dict[str, Any]:
    """``neox-epoch audit --json`` output."""
    try:
        with open_input(path, "audit JSON (--audit)", JSON_BYTES, RunLogError, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as err:
        raise RunLogError(
            f"--audit {path}: cannot read it ({err}); give the file written by neox-epoch audit ... --json > AUDIT.json"
        ) from err
    except ValueError as err:
        raise RunLogError(f"--audit {path}: not JSON ({err}); give the output of neox-epoch audit ... --json") from err
    if not isinstance(data, dict) or not isinstance(data.get("indexes"), list):
        raise RunLogError(f'--audit {path}: no "indexes" list: not the output of neox-epoch audit --json')
    return data


def _base(path: Any) -> str | None:
    return os.path.basename(str(path).rstrip("/")) if path else None


def from_audit(audit: dict[str, Any], last: Launch, path: str) -> tuple[list[Histogram], list[str]]:
    """The audit's per-index token histograms matched to the last launch's train sources (by NeoX dataset name,
    else by the data prefix's base name); notes for what could not be matched."""
    out, notes = [], []
    indexes = [
        x
        for x in audit["indexes"]
        if isinstance(x, dict) and isinstance(x.get("exposure"), dict) and str(x.get("split", "")).startswith("train")
    ]
    for s in last.sources:
        match = [
            x
            for x in indexes
            if s.dataset
            and x.get("split") == s.dataset
            and (not s.prefix or _base(x.get("data_prefix")) in (None, _base(s.prefix)))
        ]
        if not match:
            match = [x for x in indexes if _base(x.get("data_prefix")) in (_base(s.prefix), s.name)]
        if len(match) != 1:
            notes.append(
                f"{s.name}: the audit has {len(match) or 'no'} train index{'es' if len(match) > 1 else ''} "
                "with its exposure for this source; its histogram is estimated from the counters"
            )
            continue
        x = match[0]
        exp = x["exposure"]
        try:
            hist = {int(k): int(v) for k, v in dict(exp["tokens"]).items()}
        except (KeyError, TypeError, ValueError) as err:
            raise RunLogError(
                f"--audit {path}: {x.get('path')}: exposure.tokens: expected {{times: tokens}} ({err})"
            ) from err
        top = max(hist, default=0)
        consumed = exp.get("consumed_samples")
        how = (
            f"counted token by token by neox-epoch audit over {_base(x.get('path'))} ({x.get('split')}) for "
            f"{consumed} samples of this source"
        )
        bins = range(top + 1) if top <= DENSE_BINS else sorted(hist)  # (a count at many passes: its bins only)
        out.append(
            Histogram(
                s.name,
                AUDIT,
                tuple((k, hist.get(k, 0)) for k in bins),
                how,
                int(consumed) if isinstance(consumed, int) else None,
            )
        )
    return out, notes


def histograms(
    series: Series, last: Launch, audit: dict[str, Any] | None = None, audit_path: str = ""
) -> tuple[list[Histogram], list[str]]:
    """The audit's histogram where it has one, else the estimate; notes (unmatched sources, other samples)."""
    est = {h.source: h for h in estimated(series, last)}
    if audit is None:
        return list(est.values()), []
    exact, notes = from_audit(audit, last, audit_path)
    got = {h.source: h for h in exact}
    out = []
    for s in series.sources:
        h = got.get(s.name) or est.get(s.name)
        if h is None:
            continue
        drawn = s.last.samples if s.last else None
        if h.method == AUDIT and h.samples is not None and drawn is not None and h.samples != drawn:
            notes.append(
                f"{s.name}: the audit counted {h.samples:,d} samples, the counters end at {drawn:,d}: "
                "the audit is for another consumption (its --train-iters/--consumed)"
            )
        out.append(h)
    return out, notes
