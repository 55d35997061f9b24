"""neox-epoch: make "train for exactly N passes over my data" true, visible and checkable.

Layers, each importing only those listed before it: ``util``, ``semantics`` (the frameworks' arithmetic,
pure), ``formats`` (what the frameworks write, read torch-free), ``batch``, ``audit``, ``plan``,
``resume``, ``run_report``, then the framework adapters ``mcore`` and ``neox``; ``cli`` dispatches.
Everything but the adapters imports numpy and pyyaml only, never torch.
"""

__version__ = "0.1.0"
