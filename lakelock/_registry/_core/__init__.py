"""The commit protocol as a sans-I/O core (docs/ARCHITECTURE.md, "The commit core").

- :mod:`._requests`: what the core asks for and is handed back;
- :mod:`._decide`: safety — who applies what, what the root records (pure);
- :mod:`._policy`: liveness and cost — every knob, and when to wait, list, fold;
- :mod:`._committer`: the protocol itself, a generator composed of the two;
- :mod:`._hedging`, :mod:`._early`: hedged requests and reads made ahead, sans-I/O;
- :mod:`._driver`: runs it against S3 (the simulator runs it in virtual time).
"""

from lakelock._registry._core._committer import Batch, Committer, Redrive, Retry, Wait
from lakelock._registry._core._driver import Driver, Hedging
from lakelock._registry._core._policy import FoldPolicy, Hints

__all__ = [
    "Batch",
    "Committer",
    "Driver",
    "FoldPolicy",
    "Hedging",
    "Hints",
    "Redrive",
    "Retry",
    "Wait",
]
