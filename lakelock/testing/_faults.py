"""Seeded, reproducible fault injection for the embedded S3 endpoint.

A :class:`FaultPlan` is a list of :class:`FaultRule` plus one seeded random generator. For each
request the endpoint asks :meth:`FaultPlan.decide` which faults apply; rules are matched in
order on the S3 operation name, the bucket and the key prefix, and each rule fires with its
probability, at most ``count`` times (``None``: without limit). A rule that could never fire
(``count=0``, ``probability=0``, an operation no request bears) is refused when made
(:class:`~lakelock.errors.InvalidArgumentError`), not kept to let a test pass without its
fault: leave such a rule out instead.

Fault kinds, and when they strike relative to the request being applied:

=============  ======  ==================================================================
kind           when    effect
=============  ======  ==================================================================
latency        before  sleep ``delay`` seconds plus up to ``jitter`` seconds more (writes
                       wait while holding their key, as S3's per-key serialisation does)
stall          before  hold the request, before it takes its key, until stalls are released
hold           before  the same, but holding its key (a write in progress at the server)
slowdown       before  503 SlowDown, nothing applied
error          before  500 InternalError, nothing applied
conflict       before  409 ConditionalRequestConflict, nothing applied
reset          before  the connection is reset, nothing applied
timeout        before  the request hangs ``delay`` seconds plus up to ``jitter`` seconds
                       more, then the connection is reset
lost_ack       after   the request IS applied, then the connection is reset (response lost)
lost_ack_5xx   after   the request IS applied, then 500 InternalError is answered instead
truncate       after   the answer's headers (its whole Content-Length) and half its body
                       only, then the connection is closed: the client's read of the body
                       breaks off (a read too: a GET's object arrives cut short); an
                       answer of no body (a HEAD's, a PUT's) is spared, not counted
corrupt        after   the answer's body with every byte inverted, under the checksum of
                       the real one (its CRC32 if it carried none): the client's checksum
                       check of the body fails (a HEAD's answer, bodiless, is spared)
=============  ======  ==================================================================

``lost_ack`` is the case the whole protocol is built around ("Lost acknowledgements" in
docs/ARCHITECTURE.md): the client's SDK retries, and the retry meets the client's own write.

The same seed and the same sequence of requests give the same faults, so a failing chaos run
is replayed by its seed. Concurrent requests draw from one generator under a lock: the set of
faults is reproducible for a given arrival order.
"""

from __future__ import annotations

import fnmatch
import math
import random
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from lakelock.errors import InvalidArgumentError
from lakelock.testing._classify import OPERATIONS, SHADOWED

FaultKind = Literal[
    "latency",
    "stall",
    "hold",
    "slowdown",
    "error",
    "conflict",
    "reset",
    "timeout",
    "lost_ack",
    "lost_ack_5xx",
    "truncate",
    "corrupt",
]
FAULT_KINDS: frozenset[str] = frozenset(get_args(FaultKind))
BEFORE_KINDS: frozenset[str] = frozenset({"slowdown", "error", "conflict", "reset", "timeout"})
AFTER_KINDS: frozenset[str] = frozenset({"lost_ack", "lost_ack_5xx", "truncate", "corrupt"})
#: After-kinds that spoil an answer's body, and so strike reads as well as writes.
BODY_KINDS: frozenset[str] = frozenset({"truncate", "corrupt"})

__all__ = ["BODY_KINDS", "FAULT_KINDS", "FaultKind", "FaultPlan", "FaultRule", "parse_fault_spec"]


@dataclass
class FaultRule:
    """One kind of fault, for requests matching ``operation`` (a glob over S3 operation names,
    e.g. ``"PutObject"``, ``"*Multipart*"``, ``"*"``), ``bucket`` (glob) and ``prefix`` (of
    the key; a listing's own prefix for a listing).

    ``probability`` (above 0, at most 1) is per matching request; ``count`` (at least 1)
    caps how many times the rule fires (``None``: unlimited); ``delay``/``jitter`` are
    seconds, for ``latency`` and ``timeout`` (each needs one above 0). Anything else (a
    name or glob that is no string, too) is
    :class:`~lakelock.errors.InvalidArgumentError` (a ``ValueError``).
    """

    kind: FaultKind
    operation: str = "*"
    prefix: str = ""
    bucket: str = "*"
    probability: float = 1.0
    count: int | None = None
    delay: float = 0.0
    jitter: float = 0.0
    fired: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in FAULT_KINDS:
            raise _refused("kind", self.kind, f"unknown; expected one of {sorted(FAULT_KINDS)}")
        self._check_texts()
        self._check_chances()
        for name, seconds in (("delay", self.delay), ("jitter", self.jitter)):
            if not _is_number(seconds) or not 0 <= seconds < math.inf:
                raise _refused(name, seconds, f"{name} must be a number of seconds >= 0")
        if self.kind == "timeout" and self.delay + self.jitter <= 0:
            raise _refused(
                "delay",
                self.delay,
                "a timeout hangs its delay, then resets the connection: give delay > 0 "
                "(without one it is a reset: kind 'reset')",
            )
        if self.kind == "latency" and self.delay + self.jitter <= 0:
            raise _refused(
                "delay",
                self.delay,
                "a latency of no delay and no jitter delays nothing: give delay or jitter > 0",
            )
        self._check_operation()

    def _check_texts(self) -> None:
        """``operation``, ``bucket`` and ``prefix`` are strings: another value would be
        matched against every request's names at the endpoint, and break each request there
        instead of being refused here."""
        for name, value in (
            ("operation", self.operation),
            ("bucket", self.bucket),
            ("prefix", self.prefix),
        ):
            if not isinstance(value, str):
                raise _refused(name, value, f"{name} must be a string")

    def _check_chances(self) -> None:
        """The rule can fire: a probability above 0 (at most 1), a count of at least 1 or
        none. A rule that never fires would let a test relying on it pass without its
        fault."""
        if not _is_number(self.probability) or not 0.0 <= self.probability <= 1.0:
            raise _refused("probability", self.probability, "probability must be within (0, 1]")
        if self.probability == 0:
            raise _refused(
                "probability", 0, "a rule of probability 0 never fires: leave the rule out"
            )
        if self.count is not None and (not _is_whole(self.count) or self.count < 0):
            raise _refused("count", self.count, "count must be a whole number >= 1, or None")
        if self.count == 0:
            raise _refused(
                "count", 0, "a rule of count 0 never fires: leave the rule out (None: no limit)"
            )

    def _check_operation(self) -> None:
        """The ``operation`` glob names at least one operation the endpoint serves (S3's
        names, case included): a rule no request can match would never fire, and a test
        relying on it would pass without its fault."""
        if fnmatch.filter(OPERATIONS, self.operation):
            return
        given = SHADOWED.get(self.operation)
        if given is not None:
            raise _refused(
                "operation",
                self.operation,
                f"matches no S3 operation the endpoint names: its requests are {given}'s",
            )
        raise _refused(
            "operation",
            self.operation,
            "matches no S3 operation (names are S3's, case included, or a glob): "
            f"{', '.join(sorted(OPERATIONS))}",
        )

    def matches(self, operation: str, bucket: str, key: str | None) -> bool:
        if self.count is not None and self.fired >= self.count:
            return False
        if not fnmatch.fnmatchcase(operation, self.operation):
            return False
        if not fnmatch.fnmatchcase(bucket, self.bucket):
            return False
        return not self.prefix or (key is not None and key.startswith(self.prefix))

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "fired"}


def _refused(argument: str, value: object, reason: str) -> InvalidArgumentError:
    """The error for a rule's ``argument`` of ``value``: "invalid fault count 0: ..."."""
    return InvalidArgumentError(value, reason, what=f"fault {argument}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_whole(value: object) -> bool:
    """An ``int`` (a bool is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Decision:
    """What the endpoint must do to one request: wait ``delay`` seconds first, then strike with
    ``before`` (instead of applying it) or ``after`` (once applied); ``None``: no such fault.
    A ``timeout`` hangs ``hang`` seconds (its rule's delay plus up to its jitter) before the
    connection is reset."""

    delay: float = 0.0
    stall: bool = False
    hold: bool = False
    before: FaultRule | None = None
    after: FaultRule | None = None
    hang: float = 0.0


class FaultPlan:
    """Rules plus a seeded generator; thread-safe."""

    def __init__(self, rules: Iterable[FaultRule] = (), *, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._rules = list(rules)
        self._seed = seed
        self._random = random.Random(seed)
        self.injected: dict[str, int] = {}

    @property
    def seed(self) -> int:
        return self._seed

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Drop every rule and the counts of faults injected."""
        with self._lock:
            self._rules.clear()
            self.injected.clear()

    def reseed(self, seed: int) -> None:
        with self._lock:
            self._seed = seed
            self._random = random.Random(seed)

    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    def decide(self, operation: str, bucket: str, key: str | None) -> Decision:
        """Draw the faults for one request. Latencies add up; the first matching ``before``
        fault and the first matching ``after`` fault that fire are used."""
        delay = hang = 0.0
        stall = hold = False
        before: FaultRule | None = None
        after: FaultRule | None = None
        drawn: list[FaultRule] = []
        with self._lock:
            for rule in self._rules:
                if not rule.matches(operation, bucket, key):
                    continue
                if rule.kind in BEFORE_KINDS and before is not None:
                    continue
                if rule.kind in AFTER_KINDS and (after is not None or before is not None):
                    continue
                if self._random.random() >= rule.probability:
                    continue
                if rule.kind == "latency":
                    delay += rule.delay + self._random.random() * rule.jitter
                elif rule.kind == "stall":
                    stall = True
                elif rule.kind == "hold":
                    hold = True
                elif rule.kind in BEFORE_KINDS:
                    before = rule
                    hang = self._hang(rule)
                    after = None  # nothing is applied, so nothing can be lost after it
                else:
                    after = rule
                drawn.append(rule)
            for rule in drawn:
                if rule.kind in AFTER_KINDS and rule is not after:
                    continue  # displaced by a fault that struck before the request applied
                rule.fired += 1
                self.injected[rule.kind] = self.injected.get(rule.kind, 0) + 1
        return Decision(delay=delay, stall=stall, hold=hold, before=before, after=after, hang=hang)

    def _hang(self, rule: FaultRule) -> float:
        """How long a ``timeout`` hangs: its delay plus up to its jitter (drawn only when it
        has one, so plans without jitter draw as they always did)."""
        if rule.kind != "timeout":
            return 0.0
        return rule.delay + (self._random.random() * rule.jitter if rule.jitter else 0.0)

    def spare(self, rule: FaultRule) -> None:
        """Give back the ``after`` fault :meth:`decide` drew for a request it did not strike:
        one refused before it applied (a 412, a 404, a 403) or a read the kind leaves alone
        (a lost acknowledgement loses the answer of a write only). It is neither reported as
        injected nor counted against the rule's ``count``: the next request it matches gets
        it, so ``count=1`` is one answer really lost."""
        with self._lock:
            rule.fired -= 1
            left = self.injected[rule.kind] - 1
            if left:
                self.injected[rule.kind] = left
            else:
                del self.injected[rule.kind]

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "seed": self._seed,
                "rules": [r.to_json() for r in self._rules],
                "injected": dict(self.injected),
            }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultPlan:
        rules = [FaultRule(**r) for r in data.get("rules", [])]
        return cls(rules, seed=int(data.get("seed", 0)))


_SPEC = re.compile(
    r"^(?P<kind>[a-z_0-9]+)(?:=(?P<delay>[^+:@#]+)(?:\+(?P<jitter>[^:@#]+))?)?"
    r"(?::(?P<operation>[^:@#]*))?(?::(?P<prefix>[^@#]*))?"
    r"(?:@(?P<probability>[^#]+))?(?:#(?P<count>.+))?$"
)


def parse_fault_spec(spec: str) -> FaultRule:
    """Parse the command-line form ``kind[=DELAY[+JITTER]][:operation[:prefix]][@p][#count]``,
    delays in seconds, e.g. ``lost_ack:PutObject:metastore/@0.1``, ``conflict:*@0.05#10``,
    ``latency=0.02+0.01``."""
    match = _SPEC.match(spec.strip())
    if match is None:
        raise InvalidArgumentError(
            spec, "not kind[=delay[+jitter]][:op[:prefix]][@p][#n]", what="fault spec"
        )
    kind = match["kind"]
    if kind not in FAULT_KINDS:
        raise InvalidArgumentError(spec, f"unknown kind {kind!r}", what="fault spec")
    try:
        return FaultRule(
            kind=kind,  # type: ignore[arg-type]  # checked against FAULT_KINDS just above
            operation=match["operation"] or "*",
            prefix=match["prefix"] or "",
            probability=float(match["probability"] or 1.0),
            count=int(match["count"]) if match["count"] is not None else None,
            delay=float(match["delay"] or 0.0),
            jitter=float(match["jitter"] or 0.0),
        )
    except ValueError as error:  # a number that is none, or the rule's own refusal
        raise InvalidArgumentError(spec, str(error), what="fault spec") from None
