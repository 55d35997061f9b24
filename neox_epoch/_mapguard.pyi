"""Types of the compiled ``neox_epoch._mapguard`` (``_mapguard.c``; optional, used by ``neox_epoch.util.mapguard``)."""

def guard(on: bool, /) -> int:
    """on=True installs the SIGBUS guard (nested calls count) and returns 0; on=False returns the faults counted
    since the matching on=True and removes the guard when the last one is off."""

def faults() -> int:
    """The SIGBUS faults the guard turned into zero pages since it was installed."""
