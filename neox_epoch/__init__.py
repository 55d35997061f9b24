"""neox-epoch: make "train for exactly N passes over my data" true, visible and checkable.

The planning and audit core (this package minus ``neox_epoch.neox``, ``neox_epoch.mcore`` and
``neox_epoch.launcher``) imports numpy and pyyaml only, never torch.
"""

__version__ = "0.1.0"
