"""Passes over a source from the samples drawn from it.

``passes = samples / samples_per_epoch`` where an epoch holds at least one whole sample. A source shorter than one
sample (``samples_per_epoch = (tokens - 1) // seq_length = 0``: a one-token source) is still drawn from: the
frameworks build as many epochs as the requested samples need, each sample spanning several epochs. Its passes are
then counted in tokens, ``samples x seq_length / tokens`` (each sample advances ``seq_length`` tokens through the
epochs laid end to end), never 0.0 for a source that was read thousands of times.
"""

from __future__ import annotations


def passes(samples: int, samples_per_epoch: int, tokens: int | None, seq_length: int | None) -> float | None:
    """Passes over a source (see the module docstring); None when they cannot be counted (no tokens or no
    sequence length known for a source shorter than one sample)."""
    if samples_per_epoch > 0:
        return samples / samples_per_epoch
    if samples == 0:
        return 0.0
    if not tokens or not seq_length:
        return None
    return samples * seq_length / tokens


def how(samples: int, samples_per_epoch: int, tokens: int | None, seq_length: int | None) -> str:
    """The arithmetic of :func:`passes` in words."""
    if samples_per_epoch > 0 or samples == 0:
        return f"passes = samples / samples_per_epoch = {samples:,d} / {samples_per_epoch:,d}"
    if not tokens or not seq_length:
        return "passes: n/a (the source is shorter than one sample and its tokens or seq_length are not recorded)"
    return (
        f"passes = samples x seq_length / tokens = {samples:,d} x {seq_length} / {tokens:,d} (the source is "
        "shorter than one sample: samples_per_epoch 0)"
    )
