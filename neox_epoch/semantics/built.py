"""What a framework's GPT index holds for given tokens, seq_length, epochs and request: the numbers the audit
compares with what the files say (:mod:`neox_epoch.audit.validate`)."""

from __future__ import annotations

from dataclasses import dataclass

from neox_epoch.semantics import legacy, mcore, neox

NEOX, MCORE, LEGACY = "neox", "megatron-core", "megatron-legacy"


@dataclass(frozen=True)
class IndexNumbers:
    """The framework's numbers for these tokens, seq_length, epochs and request."""

    samples_per_epoch: int  # Samples one epoch of the tokens gives.
    built: int  # Samples the files' epochs give.
    epochs_for_request: int | None  # Epochs the framework builds for the request (None: no request).
    first_block: int  # Samples of all epochs but the last (the first shuffle block under the 80% rule).
    separate: bool | None  # The 80% rule separates the last epoch (None: no request to tell).


def index_numbers(
    framework: str, tokens: int, seq_length: int, epochs: int, requested: int | None, add_extra_token: int
) -> IndexNumbers:
    """:class:`IndexNumbers` of ``framework`` (:data:`NEOX`, :data:`MCORE` or :data:`LEGACY`)."""
    if framework == NEOX:
        return IndexNumbers(
            neox.samples_per_epoch(tokens, seq_length),
            neox.build(tokens, seq_length, None, epochs=epochs).samples_built,
            neox.num_epochs(tokens, seq_length, requested) if requested is not None and tokens > 0 else None,
            0,
            False,
        )
    if framework == MCORE:
        build = mcore.build(max(tokens, 1), seq_length, requested, add_extra_token) if tokens > 0 else None
        return IndexNumbers(
            max(0, mcore.samples_built(tokens, seq_length, 1, add_extra_token)),
            mcore.samples_built(tokens, seq_length, epochs, add_extra_token),
            build.epochs if build else None,
            mcore.samples_built(tokens, seq_length, epochs - 1, add_extra_token),
            build.separate_final_epoch if build and requested is not None else None,
        )
    request = legacy.build(tokens, seq_length, requested) if tokens > 0 else None
    return IndexNumbers(
        neox.samples_per_epoch(tokens, seq_length),
        neox.build(tokens, seq_length, None, epochs=epochs).samples_built if epochs else 0,
        request.epochs if request and requested is not None else None,
        neox.build(tokens, seq_length, None, epochs=epochs - 1).samples_built if epochs > 1 else 0,
        request.separate_final_epoch if request and requested is not None else None,
    )


def extra_token_from_files(stream_tokens: int, last_position: int | None, samples: int, seq_length: int) -> int | None:
    """megatron-core's add_extra_token_to_sequence from the files: a kept partial last sample ends at
    ``E*T - a``; else the sample count ``(E*T - a) // L`` tells when 0 and 1 give different counts."""
    if last_position is not None and last_position != samples * seq_length:
        return stream_tokens - last_position
    with_one, with_zero = (stream_tokens - 1) // seq_length, stream_tokens // seq_length
    if samples == with_one != with_zero:
        return 1
    if samples == with_zero != with_one:
        return 0
    return None
