"""A small, exact evaluator of S3 bucket policies for the embedded test endpoint.

What it models (IAM User Guide, "Policy evaluation logic" and "Condition operators"):

- A statement applies when its ``Principal``, ``Action``/``NotAction``,
  ``Resource``/``NotResource`` and every ``Condition`` match. An applicable ``Deny`` decides
  the request (explicit deny wins over any allow).
- **Requests no Deny applies to are allowed.** Identity policies, ACLs, ownership, SCPs and
  permission boundaries are not modelled: the embedded endpoint is single-tenant and treats
  every caller as authorised unless the bucket policy explicitly denies. :func:`evaluate` still
  reports whether an ``Allow`` applied, for callers that want to know.
- ``Action`` matching is case-insensitive, ``Resource`` matching case-sensitive; both use
  ``*`` (any run of characters) and ``?`` (one character).
- ``Principal``: ``"*"`` or ``{"AWS": "*"}`` match everyone, anonymous callers included. An
  account id or ``arn:...:iam::<id>:root`` matches every principal of that account; a role ARN
  matches the role and its sessions (``arn:...:sts::<id>:assumed-role/<name>/<session>``); user
  and session ARNs match exactly. Anonymous callers match only ``"*"``.
- Conditions: operators ``StringEquals``, ``StringNotEquals``, ``StringEqualsIgnoreCase``,
  ``StringNotEqualsIgnoreCase``, ``StringLike``, ``StringNotLike``, ``Bool`` (each also with
  ``IfExists`` and, for the ``String`` family, ``ForAnyValue:``/``ForAllValues:``) and ``Null``.
  Operators are ANDed, keys under one operator are ANDed, values for one key are ORed (for a
  negated operator: the value must differ from all of them). Key names are case-insensitive.
  A key missing from the request makes a positive operator false and a negated one true;
  ``...IfExists`` is true when the key is missing; ``Null: true`` means missing;
  ``ForAnyValue`` over a missing key is false and ``ForAllValues`` true. Context values are
  single strings (the S3 keys :mod:`._policy_context` produces are all single-valued).

Anything else (``NotPrincipal``, service or federated principals, policy variables, numeric,
date, IP or ARN operators...) raises ``ValueError`` rather than being silently misread.

Which IAM action, resource and condition keys an S3 request carries is worked out in
:mod:`._policy_context`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "PARTITIONS",
    "Decision",
    "PolicyRequest",
    "evaluate",
    "is_allowed",
    "validate_policy",
]

Decision = Literal["deny", "allow", "implicit"]
"""``deny``: an explicit Deny applied. ``allow``: an Allow applied and no Deny.
``implicit``: no statement applied (the embedded endpoint lets such requests through)."""

_VERSIONS = frozenset({"2012-10-17", "2008-10-17"})
_POLICY_KEYS = frozenset({"Version", "Id", "Statement"})
_STATEMENT_KEYS = frozenset(
    {
        "Sid",
        "Effect",
        "Principal",
        "NotPrincipal",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Condition",
    }
)
#: The AWS partitions an ARN may name.
PARTITIONS = frozenset({"aws", "aws-cn", "aws-us-gov"})
_PARTITION = "|".join(sorted(PARTITIONS))
_IAM_NAME = r"[\w+=,.@-]{1,64}"
_PRINCIPAL_IN_POLICY = re.compile(
    rf"arn:(?P<partition>{_PARTITION}):(?:"
    rf"iam::(?P<account>\d{{12}}):(?:(?P<root>root)|(?P<kind>role|user)/(?:[\w+=,.@-]+/)*(?P<name>{_IAM_NAME}))"
    rf"|sts::(?P<sts_account>\d{{12}}):assumed-role/(?P<session_role>{_IAM_NAME})/[\w+=,.@-]{{2,64}})",
    re.ASCII,
)
_CALLER = _PRINCIPAL_IN_POLICY  # callers have the same shapes as principals named in policies
_ACCOUNT_ID = re.compile(r"\d{12}", re.ASCII)
_ACTION = re.compile(r"\*|s3:[A-Za-z0-9*?]+", re.ASCII | re.IGNORECASE)  # actions ignore case
_CONDITION_KEY = re.compile(r"[A-Za-z0-9-]+:[A-Za-z0-9_./<>:*-]+", re.ASCII)
_S3_RESOURCE = re.compile(
    rf"arn:(?:{_PARTITION}):s3:::(?P<bucket>[^/]*)(?:/.*)?", re.ASCII | re.DOTALL
)

_STRING_OPERATORS = frozenset(
    {
        "StringEquals",
        "StringNotEquals",
        "StringEqualsIgnoreCase",
        "StringNotEqualsIgnoreCase",
        "StringLike",
        "StringNotLike",
    }
)
_NEGATED = frozenset({"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike"})


@dataclass(frozen=True)
class PolicyRequest:
    """One authorisation question: may ``principal`` perform ``action`` on ``resource``?

    ``principal`` is the caller's ARN (``arn:aws:iam::<id>:user/<name>``,
    ``arn:aws:iam::<id>:role/<name>``, ``arn:aws:sts::<id>:assumed-role/<role>/<session>``,
    ``arn:aws:iam::<id>:root``) or ``None`` for an anonymous caller. ``context`` holds the
    condition keys present on the request; names are matched case-insensitively (stored
    lower-cased), values as given.
    """

    action: str
    resource: str
    principal: str | None
    context: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.action, str) or not self.action:
            raise ValueError(f"action must be a non-empty string, got {self.action!r}")
        if not isinstance(self.resource, str) or not self.resource:
            raise ValueError(f"resource must be a non-empty string, got {self.resource!r}")
        if self.principal is not None and not _CALLER.fullmatch(self.principal):
            raise ValueError(f"principal {self.principal!r} is not an IAM or STS principal ARN")
        lowered: dict[str, str] = {}
        for name, value in self.context.items():
            if not isinstance(value, str):
                raise ValueError(f"context value for {name!r} must be a string, got {value!r}")
            lowered[name.lower()] = value
        # A private, read-only copy: the caller's mapping is neither kept nor mutated.
        object.__setattr__(self, "context", MappingProxyType(lowered))


# --------------------------------------------------------------------------------------------
# Policy parsing (validation and evaluation share it, so what validates is what is evaluated)


@dataclass(frozen=True)
class _Condition:
    operator: str  # base operator, e.g. "StringEquals", "Bool", "Null"
    qualifier: Literal["", "ForAnyValue", "ForAllValues"]
    if_exists: bool
    key: str  # lower-cased
    values: tuple[str, ...]


@dataclass(frozen=True)
class _Principal:
    everyone: bool
    accounts: frozenset[tuple[str, str]]  # (partition or "", account): whole accounts
    exact: frozenset[str]  # user ARNs and session ARNs
    roles: frozenset[tuple[str, str, str]]  # (partition, account, role name)


@dataclass(frozen=True)
class _Statement:
    effect: Literal["Allow", "Deny"]
    principal: _Principal
    actions: tuple[str, ...]
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    conditions: tuple[_Condition, ...]


def validate_policy(policy: Any, *, bucket: str | None = None) -> None:
    """Raise ``ValueError`` with a clear message if ``policy`` is malformed or uses a construct
    this evaluator does not support. With ``bucket``, every ``Resource`` must name that bucket
    or an object in it (S3 refuses a bucket policy about other resources)."""
    _parse(policy, bucket=bucket)


def evaluate(policy: Mapping[str, Any], request: PolicyRequest) -> Decision:
    """Decide ``request`` under ``policy``: ``"deny"`` if any Deny statement applies, else
    ``"allow"`` if an Allow applies, else ``"implicit"``. Raises ``ValueError`` on a policy
    :func:`validate_policy` rejects."""
    allowed = False
    for statement in _parse(policy, bucket=None):
        if _applies(statement, request):
            if statement.effect == "Deny":
                return "deny"
            allowed = True
    return "allow" if allowed else "implicit"


def is_allowed(policy: Mapping[str, Any], request: PolicyRequest) -> bool:
    """``False`` iff an explicit Deny in ``policy`` applies to ``request``.

    Requests no statement applies to are allowed: identity policies are not modelled, so the
    embedded endpoint trusts every caller the bucket policy does not deny."""
    return evaluate(policy, request) != "deny"


def _parse(policy: Any, *, bucket: str | None) -> tuple[_Statement, ...]:
    if not isinstance(policy, Mapping):
        raise ValueError("a policy must be a JSON object")
    unknown = set(policy) - _POLICY_KEYS
    if unknown:
        raise ValueError(f"unknown policy element(s): {sorted(unknown)}")
    version = policy.get("Version", "2008-10-17")
    if version not in _VERSIONS:
        raise ValueError(
            f"unsupported policy Version {version!r}; expected one of {sorted(_VERSIONS)}"
        )
    if "Id" in policy and not isinstance(policy["Id"], str):
        raise ValueError("policy Id must be a string")
    if "Statement" not in policy:
        raise ValueError("a policy needs a Statement")
    raw = policy["Statement"]
    raw_statements = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(raw_statements, list) or not raw_statements:
        raise ValueError("Statement must be an object or a non-empty list of objects")
    return tuple(_parse_statement(s, i, bucket) for i, s in enumerate(raw_statements))


def _parse_statement(raw: Any, index: int, bucket: str | None) -> _Statement:
    where = f"Statement[{index}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be an object")
    if isinstance(raw.get("Sid"), str):
        where = f"{where} ({raw['Sid']!r})"
    unknown = set(raw) - _STATEMENT_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown element(s) {sorted(unknown)}")
    if "Sid" in raw and not isinstance(raw["Sid"], str):
        raise ValueError(f"{where}: Sid must be a string")
    effect = raw.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise ValueError(f"{where}: Effect must be 'Allow' or 'Deny', got {effect!r}")
    if "NotPrincipal" in raw:
        raise ValueError(f"{where}: NotPrincipal is not supported by this evaluator")
    if "Principal" not in raw:
        raise ValueError(f"{where}: a bucket policy statement needs a Principal")
    principal = _parse_principal(raw["Principal"], where)
    actions, not_action = _exactly_one(raw, "Action", "NotAction", where)
    for action in actions:
        if "${" in action:
            raise ValueError(f"{where}: policy variables are not supported ({action!r})")
        if not _ACTION.fullmatch(action):
            raise ValueError(
                f"{where}: {action!r} is not an S3 action (expected 's3:<Name>' or '*')"
            )
    resources, not_resource = _exactly_one(raw, "Resource", "NotResource", where)
    for resource in resources:
        _check_resource(resource, bucket, where)
    conditions = _parse_conditions(raw.get("Condition", {}), where)
    return _Statement(effect, principal, actions, not_action, resources, not_resource, conditions)


def _exactly_one(
    raw: Mapping[str, Any], name: str, negated: str, where: str
) -> tuple[tuple[str, ...], bool]:
    if (name in raw) == (negated in raw):
        raise ValueError(f"{where}: exactly one of {name} and {negated} is required")
    key = name if name in raw else negated
    return _string_list(raw[key], f"{where}: {key}"), key == negated


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueError(f"{where} must be a string or a non-empty list of strings")
    for item in items:
        if not isinstance(item, str) or not item:
            raise ValueError(f"{where} must contain only non-empty strings, got {item!r}")
    return tuple(items)


def _check_resource(resource: str, bucket: str | None, where: str) -> None:
    if "${" in resource:
        raise ValueError(f"{where}: policy variables are not supported ({resource!r})")
    if resource == "*":
        return
    match = _S3_RESOURCE.fullmatch(resource)
    if match is None:
        raise ValueError(f"{where}: {resource!r} is not an S3 ARN (arn:aws:s3:::<bucket>[/<key>])")
    if bucket is not None and match["bucket"] != bucket:
        raise ValueError(
            f"{where}: resource {resource!r} is not bucket {bucket!r} or an object in it"
        )


def _parse_principal(raw: Any, where: str) -> _Principal:
    if raw == "*":
        return _Principal(True, frozenset(), frozenset(), frozenset())
    if not isinstance(raw, Mapping) or set(raw) != {"AWS"}:
        raise ValueError(
            f"{where}: Principal must be '*' or {{'AWS': ...}}; service, federated and "
            "canonical-user principals are not supported by this evaluator"
        )
    entries = _string_list(raw["AWS"], f"{where}: Principal.AWS")
    if "*" in entries:
        return _Principal(True, frozenset(), frozenset(), frozenset())
    accounts: set[tuple[str, str]] = set()
    exact: set[str] = set()
    roles: set[tuple[str, str, str]] = set()
    for entry in entries:
        if _ACCOUNT_ID.fullmatch(entry):
            # A bare account id is the short form of arn:<partition>:iam::<id>:root, in the
            # bucket's partition: "" matches any.
            accounts.add(("", entry))
            continue
        match = _PRINCIPAL_IN_POLICY.fullmatch(entry)
        if match is None:
            raise ValueError(
                f"{where}: principal {entry!r} is not an account id or an IAM/STS principal ARN "
                "(wildcards are allowed only as the whole value '*')"
            )
        if match["root"]:
            accounts.add((match["partition"], match["account"]))
        elif match["kind"] == "role":
            roles.add((match["partition"], match["account"], match["name"]))
        else:
            exact.add(entry)
    return _Principal(False, frozenset(accounts), frozenset(exact), frozenset(roles))


def _parse_conditions(raw: Any, where: str) -> tuple[_Condition, ...]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: Condition must be an object")
    parsed: list[_Condition] = []
    for operator_name, block in raw.items():
        operator, qualifier, if_exists = _split_operator(operator_name, where)
        if not isinstance(block, Mapping) or not block:
            raise ValueError(
                f"{where}: Condition {operator_name!r} must map condition keys to values"
            )
        for key, value in block.items():
            if not isinstance(key, str) or not _CONDITION_KEY.fullmatch(key):
                raise ValueError(f"{where}: {key!r} is not a condition key ('<service>:<name>')")
            values = _condition_values(value, f"{where}: Condition {operator_name!r} {key!r}")
            if operator in ("Bool", "Null"):
                values = tuple(v.lower() for v in values)
                if not set(values) <= {"true", "false"}:
                    raise ValueError(
                        f"{where}: {operator} {key!r} takes 'true' or 'false', got {list(values)}"
                    )
            parsed.append(_Condition(operator, qualifier, if_exists, key.lower(), values))
    return tuple(parsed)


def _split_operator(
    name: Any, where: str
) -> tuple[str, Literal["", "ForAnyValue", "ForAllValues"], bool]:
    if not isinstance(name, str):
        raise ValueError(f"{where}: condition operator must be a string")
    qualifier: Literal["", "ForAnyValue", "ForAllValues"] = ""
    base = name
    if base.startswith("ForAnyValue:"):
        qualifier, base = "ForAnyValue", base.removeprefix("ForAnyValue:")
    elif base.startswith("ForAllValues:"):
        qualifier, base = "ForAllValues", base.removeprefix("ForAllValues:")
    if_exists = base.endswith("IfExists") and base != "IfExists"
    if if_exists:
        base = base.removesuffix("IfExists")
    supported = (
        base in _STRING_OPERATORS
        or (base == "Bool" and not qualifier)
        or (base == "Null" and not qualifier and not if_exists)
    )
    if not supported:
        raise ValueError(f"{where}: condition operator {name!r} is not supported by this evaluator")
    return base, qualifier, if_exists


def _condition_values(value: Any, where: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError(f"{where} has no values")
    out: list[str] = []
    for item in items:
        if isinstance(item, bool):
            # IAM accepts JSON booleans and compares their string form.
            out.append("true" if item else "false")
        elif isinstance(item, str):
            if "${" in item:
                raise ValueError(f"{where}: policy variables are not supported ({item!r})")
            out.append(item)
        else:
            raise ValueError(f"{where}: values must be strings or booleans, got {item!r}")
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Matching


def _applies(statement: _Statement, request: PolicyRequest) -> bool:
    return (
        _principal_matches(statement.principal, request.principal)
        and _any_glob(statement.actions, request.action, ignore_case=True) != statement.not_action
        and _any_glob(statement.resources, request.resource, ignore_case=False)
        != statement.not_resource
        and all(_condition_holds(c, request.context) for c in statement.conditions)
    )


def _principal_matches(principal: _Principal, caller: str | None) -> bool:
    if principal.everyone:
        return True
    if caller is None:
        return False
    match = _CALLER.fullmatch(caller)
    assert match is not None  # PolicyRequest validated it
    partition = match["partition"]
    account = match["account"] or match["sts_account"]
    if caller in principal.exact or not principal.accounts.isdisjoint(
        {(partition, account), ("", account)}
    ):
        return True
    role = match["name"] if match["kind"] == "role" else match["session_role"]
    # Role principals are stored without their path in a session ARN: match on the name.
    return role is not None and (partition, account, role) in principal.roles


def _any_glob(patterns: Iterable[str], value: str, *, ignore_case: bool) -> bool:
    return any(_glob(p, ignore_case).fullmatch(value) is not None for p in patterns)


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _condition_holds(condition: _Condition, context: Mapping[str, str]) -> bool:
    present = condition.key in context
    if condition.operator == "Null":
        # "true" asks for absence, "false" for presence; several values are ORed.
        return any((v == "true") != present for v in condition.values)
    if not present:
        if condition.if_exists:
            return True
        if condition.qualifier == "ForAllValues":
            return True  # vacuously: every one of no values matches
        if condition.qualifier == "ForAnyValue":
            return False
        return condition.operator in _NEGATED
    value = context[condition.key]
    # With a single-valued context, ForAnyValue and ForAllValues reduce to the plain test.
    return _value_matches(condition.operator, condition.values, value)


def _value_matches(operator: str, expected: tuple[str, ...], value: str) -> bool:
    if operator == "Bool":
        return value.lower() in expected
    if operator in ("StringEquals", "StringNotEquals"):
        hit = value in expected
    elif operator in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        hit = value.casefold() in {e.casefold() for e in expected}
    else:  # StringLike / StringNotLike
        hit = any(_glob(e, False).fullmatch(value) is not None for e in expected)
    return not hit if operator in _NEGATED else hit
