"""The commit protocol as a sans-I/O core (docs/ARCHITECTURE.md, "The commit core").

- :mod:`._requests`: what the core asks for and is handed back;
- :mod:`._decide`: safety — who applies what, what the root records (pure);
- :mod:`._policy`: the knobs of scheduling (:class:`FoldPolicy`);
- :mod:`._schedule`: liveness — every piece of state it reads, and when to wait, list, fold;
- :mod:`._attempt`: one attempt, straight through (read, settle, fold, apply, seal, swap),
  and the loop that retries it; :mod:`._fold` its fold, :mod:`._io` its requests,
  :mod:`._state` what a batch carries;
- :mod:`._linger`, :mod:`._read_ahead`: folding on for others, the next fold read ahead;
- :mod:`._committer`: one process's core: where a batch starts and ends;
- :mod:`._hedging`, :mod:`._early`: hedged requests and reads made ahead, sans-I/O;
- :mod:`._driver`: runs it against S3 (the simulator runs it in virtual time).
"""

from lakelock._registry._core._committer import Committer
from lakelock._registry._core._driver import Driver, Hedging
from lakelock._registry._core._policy import FoldPolicy
from lakelock._registry._core._schedule import Hints, Scheduler
from lakelock._registry._core._state import Batch, Redrive, Retry, Wait

__all__ = [
    "Batch",
    "Committer",
    "Driver",
    "FoldPolicy",
    "Hedging",
    "Hints",
    "Redrive",
    "Retry",
    "Scheduler",
    "Wait",
]
