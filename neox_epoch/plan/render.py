"""Human output of a plan: a per-source table with the arithmetic shown, warnings and settings."""

from __future__ import annotations

from neox_epoch.plan.builds import FRAMEWORKS
from neox_epoch.plan.model import Plan
from neox_epoch.plan.schedule import ScheduleChange
from neox_epoch.util.text import fmt
from neox_epoch.util.text import table as text_table

COLUMNS = (
    ("split", "split"),
    ("name", "source"),
    ("documents", "docs"),
    ("tokens", "tokens"),
    ("samples_per_epoch", "samples/epoch"),
    ("samples_requested", "requested"),
    ("epochs_built", "epochs built"),
    ("samples_built", "built"),
    ("samples_drawn", "drawn"),
    ("passes", "passes"),
    ("tokens_unseen", "tokens unseen"),
)


def table(plan: Plan) -> str:
    rows = []
    for s in plan.sources:
        row = []
        for key, _ in COLUMNS:
            text = fmt(getattr(s, key), float_digits=4)
            if key == "tokens_unseen" and not s.tokens_unseen_exact:
                text = "~" + text
            if key == "name" and s.copies > 1:
                text += f" (listed {s.copies}x)"
            if key == "samples_drawn" and s.copies > 1:
                text += (
                    f" ({fmt(s.samples_distinct, float_digits=4)} distinct)"
                    if s.samples_distinct is not None
                    else " (distinct: needs both indices)"
                )
            if key == "epochs_built" and s.epochs_built > 1:
                text += " (sep.)" if s.separate_final_epoch else " (joint)"
            row.append(text)
        rows.append(row)
    return "\n".join(text_table([h for _, h in COLUMNS], rows, left=2, rule=True))


#: settings rendered as their own sections, not as ``key: value`` lines
SECTIONS = ("schedule", "stock_neox_exact")


def schedule_section(entries: object) -> list[str]:
    """The "schedule" section: one ``key: old -> new (action): why`` line per key looked at."""
    if not isinstance(entries, list):
        return []
    lines = [ScheduleChange(**e).line() for e in entries if isinstance(e, dict)]
    return ["", "schedule (learning rate, checkpoints, evaluation for the new train_iters):"] + [
        f"  {x}" for x in lines
    ]


def stock_section(stock: object) -> list[str]:
    """Whether stock NeoX, without neox-epoch, runs this plan exactly (and with which keys)."""
    if not isinstance(stock, dict):
        return []
    if stock.get("exact"):
        keys = ", ".join(f"{k}: {v!r}" for k, v in dict(stock.get("config") or {}).items())
        return ["", "stock NeoX without neox-epoch:", f"  exact with {keys}", f"  ({stock.get('why')})"]
    return ["", "stock NeoX without neox-epoch:", f"  not exact: {stock.get('why')}"]


def render(plan: Plan) -> str:
    """The full text report."""
    label = FRAMEWORKS[plan.framework].version_label if plan.framework in FRAMEWORKS else "{}"
    ver = " " + label.format(plan.framework_version) if plan.framework_version else ""
    out = [
        f"neox-epoch plan ({plan.framework}{ver} semantics)",
        f"seq_length {plan.seq_length}, global batch {plan.global_batch_size}, train_iters {plan.train_iters:,d} "
        f"-> {plan.train_samples:,d} train samples"
        + (
            f" requested, {plan.consumed['train']:,d} consumed"
            if plan.consumed.get("train", plan.train_samples) != plan.train_samples
            else ""
        ),
        "",
        table(plan),
        "",
        "arithmetic:",
    ]
    out += [f"  {a}" for a in plan.arithmetic]
    for s in plan.sources:
        out.append(
            f"  {s.split}/{s.name}: samples_per_epoch = (tokens - a) // seq_length "
            f"with tokens {s.tokens:,d}; {s.formula}"
        )
    for b in plan.blends:
        w = ", ".join(f"{x:.6f}" for x in b.weights) if b.weights else "exhaustive"
        out.append(
            f"  {b.split} blend: {b.rule}; size {b.size}; greedy weights [{w}]; first {b.consumed} draws "
            f"per source {list(b.draws)} (exact greedy replay, not w*N)"
        )
    if plan.settings:
        out += ["", "settings for exact passes:"]
        out += [f"  {k}: {v}" for k, v in plan.settings.items() if k not in SECTIONS]
        out.append(
            f"  remainder: {plan.remainder_samples} samples ({plan.remainder_tokens:,d} tokens) under one global "
            "batch are not drawn"
        )
        out += schedule_section(plan.settings.get("schedule"))
        out += stock_section(plan.settings.get("stock_neox_exact"))
    if plan.warnings:
        out += ["", "warnings:"]
        out += [f"  - {w}" for w in plan.warnings]
    return "\n".join(out)
