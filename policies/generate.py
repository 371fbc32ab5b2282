"""Regenerate the example bucket policies in this directory.

    python policies/generate.py

Each file is exactly what ``lakelock.generate_bucket_policy`` returns for its arguments, as
pretty, key-sorted JSON with a trailing newline; ``tests/test_bucket_policy.py`` fails when
they drift.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

from lakelock._policy import generate_bucket_policy

HERE = Path(__file__).resolve().parent

EXAMPLES: dict[str, dict[str, Any]] = {
    # Writers and bucket in one account: the blog's scenario, with its metastore statement fixed.
    "single-account.json": {
        "bucket": "example-data-lake",
        "principals": ["arn:aws:iam::111111111111:role/etl-writer"],
    },
    # A partner account's role writes too. The Deny binds it even though the Allow that lets it
    # in at all (bucket policy plus its own identity policy) is granted separately.
    "cross-account.json": {
        "bucket": "example-data-lake",
        "principals": [
            "arn:aws:iam::111111111111:role/etl-writer",
            "arn:aws:iam::222222222222:role/partner-etl",
        ],
    },
}


def render(policy: dict[str, Any]) -> str:
    """The on-disk form: two-space indented, keys sorted, one trailing newline."""
    return orjson.dumps(policy, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


def main(directory: Path = HERE) -> None:
    for name, example in EXAMPLES.items():
        arguments = dict(example)
        policy = generate_bucket_policy(arguments.pop("bucket"), **arguments)
        (directory / name).write_text(render(policy), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
