"""Fault plans: seeded and reproducible, parsed from the command-line form, and the endpoint
runs the same in a child process as in a thread."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, FlexibleChecksumError, ResponseStreamingError

from lakelock.errors import InvalidArgumentError
from lakelock.testing import FaultPlan, FaultRule, S3Endpoint, parse_fault_spec


def draw(plan: FaultPlan, n: int) -> list[tuple[float, str | None, str | None]]:
    decisions = [plan.decide("PutObject", "b", f"k{i}") for i in range(n)]
    return [
        (d.delay, d.before.kind if d.before else None, d.after.kind if d.after else None)
        for d in decisions
    ]


def rules() -> list[FaultRule]:
    return [
        FaultRule("latency", delay=0.01, jitter=0.01),
        FaultRule("conflict", probability=0.3),
        FaultRule("lost_ack", probability=0.3),
    ]


def test_same_seed_same_faults() -> None:
    """Two plans with one seed decide identically; another seed decides otherwise."""
    assert draw(FaultPlan(rules(), seed=7), 200) == draw(FaultPlan(rules(), seed=7), 200)
    assert draw(FaultPlan(rules(), seed=7), 200) != draw(FaultPlan(rules(), seed=8), 200)


def test_nothing_is_lost_after_a_refusal() -> None:
    """A request refused before it is applied never also counts as a lost acknowledgement."""
    for _, before, after in draw(FaultPlan(rules(), seed=3), 500):
        assert before is None or after is None


def test_count_and_match() -> None:
    """count caps firings; operation, bucket and prefix must all match."""
    plan = FaultPlan([FaultRule("error", operation="Put*", prefix="meta/", bucket="b*", count=2)])
    assert plan.decide("GetObject", "b1", "meta/x").before is None
    assert plan.decide("PutObject", "a1", "meta/x").before is None
    assert plan.decide("PutObject", "b1", "data/x").before is None
    fired = [plan.decide("PutObject", "b1", "meta/x").before for _ in range(4)]
    assert [r is not None for r in fired] == [True, True, False, False]
    assert plan.injected == {"error": 2}


def test_a_displaced_lost_ack_is_neither_counted_nor_spent() -> None:
    """A lost ack drawn for a request that a later rule refuses before it is applied does not
    happen: it is not reported as injected and does not use up the rule's count."""
    lost = FaultRule("lost_ack", operation="PutObject", count=1)
    plan = FaultPlan([lost, FaultRule("conflict", operation="PutObject", count=1)])
    first = plan.decide("PutObject", "b", "k")
    assert (first.before is not None, first.after) == (True, None)
    assert plan.injected == {"conflict": 1}
    assert plan.decide("PutObject", "b", "k").after is lost
    assert plan.injected == {"conflict": 1, "lost_ack": 1}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("lost_ack", FaultRule("lost_ack")),
        (
            "lost_ack:PutObject:metastore/@0.1",
            FaultRule("lost_ack", "PutObject", "metastore/", probability=0.1),
        ),
        ("conflict:*@0.05#10", FaultRule("conflict", probability=0.05, count=10)),
        ("latency=0.02+0.01", FaultRule("latency", delay=0.02, jitter=0.01)),
        ("timeout=5:GetObject", FaultRule("timeout", "GetObject", delay=5.0)),
    ],
)
def test_parse_fault_spec(spec: str, expected: FaultRule) -> None:
    """The CLI form parses to the rule it spells."""
    assert parse_fault_spec(spec) == expected


@pytest.mark.parametrize(
    "spec", ["", "nonsense", "lost_ack@2", "error#-1", "latency=fast", "conflict@x"]
)
def test_bad_fault_specs_are_refused(spec: str) -> None:
    """A malformed spec is a ValueError naming it, never a silently different rule."""
    with pytest.raises(ValueError, match=r"fault spec|probability|count|unknown"):
        parse_fault_spec(spec)


@pytest.mark.parametrize(
    ("arguments", "spec", "refusal"),
    [
        ({"count": 0}, "lost_ack:PutObject#0", "count 0 never fires"),
        ({"probability": 0.0}, "lost_ack:PutObject@0", "probability 0 never fires"),
        ({"count": -1}, "lost_ack:PutObject#-1", "whole number >= 1"),
        ({"probability": -0.1}, "lost_ack:PutObject@-0.1", r"within \(0, 1\]"),
        ({"probability": 1.5}, "lost_ack:PutObject@1.5", r"within \(0, 1\]"),
        ({"probability": float("nan")}, "lost_ack:PutObject@nan", r"within \(0, 1\]"),
    ],
)
def test_a_fault_rule_that_could_never_fire_or_is_out_of_bounds_is_refused_typed(
    s3: S3Endpoint, arguments: dict[str, Any], spec: str, refusal: str
) -> None:
    """``count=0`` and ``probability=0`` were accepted, and such a rule never fired: a test
    written with one passed without its fault. They are refused when the rule is made (by
    ``inject``, ``FaultRule``, or in the command-line form), as a rule for an operation no
    request bears is, and so are rates out of (0, 1] and negative counts: all with
    ``InvalidArgumentError`` (a ``ValueError``), nothing added to the endpoint."""
    with pytest.raises(InvalidArgumentError, match=refusal):
        s3.inject("lost_ack", operation="PutObject", **arguments)
    with pytest.raises(InvalidArgumentError, match=refusal):
        FaultRule("lost_ack", operation="PutObject", **arguments)
    with pytest.raises(InvalidArgumentError, match=refusal):
        parse_fault_spec(spec)
    assert s3.faults()["rules"] == []
    s3.inject("lost_ack", operation="PutObject", count=1, probability=1.0)  # the bounds' own
    assert len(s3.faults()["rules"]) == 1


def test_a_fault_argument_the_endpoint_does_not_know_is_refused(s3: S3Endpoint) -> None:
    """A misspelt argument is Python's ``TypeError`` naming it, nothing added; a misspelt
    kind is ``InvalidArgumentError`` listing the kinds."""
    with pytest.raises(TypeError, match="probabilty"):
        s3.inject("lost_ack", operation="PutObject", probabilty=0.5)  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match="lost_ack_5xx"):
        s3.inject("lost-ack", operation="PutObject")  # type: ignore[arg-type]
    assert s3.faults()["rules"] == []


def test_endpoint_in_a_child_process() -> None:
    """mode="process": the same endpoint, faults, settings and counts, served by a child
    process."""
    with S3Endpoint(mode="process") as s3:
        s3.create_bucket("child")
        client = s3.client()
        s3.inject("lost_ack", operation="PutObject", count=1)
        with pytest.raises(ClientError) as info:  # the SDK's retry meets its own write
            client.put_object(Bucket="child", Key="k", Body=b"x", IfNoneMatch="*")
        assert info.value.response["Error"]["Code"] == "PreconditionFailed"
        assert s3.faults()["injected"] == {"lost_ack": 1}
        assert s3.stats()["PutObject"] == 2  # the lost one and the SDK's retry
        assert client.get_object(Bucket="child", Key="k")["Body"].read() == b"x"
        s3.configure(lacking={"delete-if-match": "refuse"})
        with pytest.raises(ClientError) as refused:
            client.delete_object(Bucket="child", Key="k", IfMatch='"any"')
        assert refused.value.response["Error"]["Code"] == "NotImplemented"


@pytest.mark.parametrize(
    ("kind", "failure"),
    [("truncate", ResponseStreamingError), ("corrupt", FlexibleChecksumError)],
)
def test_a_body_fault_spoils_the_answer_not_the_object(
    s3: S3Endpoint, bucket: str, kind: Any, failure: type[Exception]
) -> None:
    """``truncate`` answers 200 and breaks the body off (botocore's read fails mid-body),
    ``corrupt`` answers 200 with a body that fails its checksum; either way the object is
    untouched, and the next GET on the same client gets it whole."""
    client = s3.client()
    client.put_object(Bucket=bucket, Key="k", Body=b"0123456789", IfNoneMatch="*")
    s3.inject(kind, operation="GetObject", prefix="k", count=1)
    answer = client.get_object(Bucket=bucket, Key="k")
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    with pytest.raises(failure):
        answer["Body"].read()
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"0123456789"
    assert s3.faults()["injected"] == {kind: 1}
