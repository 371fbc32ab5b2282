"""Find the seeds at which a seed-pinned test's case arises again.

A change to the commit core moves every simulated trace, so a test that needs its scenario
to arise at one seed (a parametrize value, a literal in its body, a module constant) stops
passing. This runs the test's body with other seeds in place of the pinned one, over a
pool of processes, and prints the smallest seed at which it passes.

    python scripts/seedscan.py 'tests/test_simulator.py::test_x[fate_error-76-not ...]' \\
        --pin 76 --first 0 --count 3000 --jobs 2
    python scripts/seedscan.py tests/test_simulator.py::test_y --constant RERUN_SEED

How the seed is replaced: ``--constant NAME`` sets that module global; otherwise a
parametrized test has the argument equal to ``--pin`` replaced, and a plain test has its
``seed=K`` / ``sweep_config(K)`` (else each whole-word K) replaced, K the ``--pin``.
Of fixtures, only ``monkeypatch`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Target:
    """One test to scan: where it is, which of its parameter sets, and how its seed is set."""

    module: str
    function: str
    param_id: str | None
    pin: int | None
    constant: str | None
    #: the test's source and first line, read once: the file may be edited while it runs
    source: str = ""
    line: int = 1

    @classmethod
    def parse(cls, test_id: str, pin: int | None, constant: str | None) -> Target:
        path, _, name = test_id.partition("::")
        function, _, rest = name.partition("[")
        module = Path(path).with_suffix("").as_posix().replace("/", ".")
        test = getattr(importlib.import_module(module), function)
        lines, line = inspect.getsourcelines(test)
        return cls(
            module, function, rest[:-1] if rest else None, pin, constant, "".join(lines), line
        )


def param_sets(function: Any) -> list[tuple[list[str], list[Any], str]]:
    """The (argnames, values, id) of each parameter set of ``function``'s parametrize marks
    (one mark: ids as pytest makes them for ints and strings, or as given)."""
    sets: list[tuple[list[str], list[Any], str]] = []
    for mark in getattr(function, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = mark.args[0]
        argnames = [n.strip() for n in names.split(",")] if isinstance(names, str) else names
        ids = mark.kwargs.get("ids")
        for i, value in enumerate(mark.args[1]):
            values = list(getattr(value, "values", value if len(argnames) > 1 else [value]))
            given = getattr(value, "id", None) or (ids[i] if ids else None)
            sets.append((argnames, values, given or "-".join(map(str, values))))
    return sets


def body_with_seed(target: Target, seed: int) -> Callable[..., None]:
    """The test's body as a call of no arguments, with ``seed`` in place of the pinned one."""
    module = importlib.import_module(target.module)
    function = getattr(module, target.function)
    if target.constant is not None:
        held = getattr(module, target.constant)
        # a config dataclass (SimConfig) keeps its other knobs; a bare int is the seed
        is_config = dataclasses.is_dataclass(held) and not isinstance(held, type)
        setattr(
            module, target.constant, dataclasses.replace(held, seed=seed) if is_config else seed
        )
        plain: Callable[..., None] = function
        return plain
    if target.param_id is not None:
        for argnames, values, given in param_sets(function):
            if given == target.param_id:
                swapped = [seed if v == target.pin and isinstance(v, int) else v for v in values]
                return functools.partial(function, **dict(zip(argnames, swapped, strict=True)))
        raise SystemExit(f"no parameter set {target.param_id!r} of {target.function}")
    if target.pin is None:
        raise SystemExit("a plain test needs --pin (the seed literal in its body)")
    source = textwrap.dedent(target.source)
    source = source[source.index("def ") :]  # its decorators ran when the module loaded
    # a seed is spelt ``seed=K`` or ``sweep_config(K)``; only where it is not, every whole K
    spelt = rf"(?<=seed=){target.pin}\b|(?<=sweep_config\(){target.pin}\b"
    whole = rf"(?<![\w.]){target.pin}(?![\w.])"
    source = re.sub(spelt if re.search(spelt, source) else whole, str(seed), source)
    namespace: dict[str, Any] = {}
    # padded so that a traceback's line numbers are the file's
    padded = "\n" * (target.line - 1) + source
    exec(compile(padded, inspect.getfile(function), "exec"), vars(module), namespace)
    rewritten: Callable[..., None] = namespace[target.function]
    return rewritten


def attempt(target: Target, seed: int) -> tuple[int, str | None]:
    """Run the test at ``seed``: None if it passed, else the first line of why not."""
    try:
        body = body_with_seed(target, seed)
        with pytest.MonkeyPatch.context() as monkeypatch:
            # the one fixture these tests take: undone before the process runs the next seed
            takes = "monkeypatch" in inspect.signature(body).parameters
            body(monkeypatch=monkeypatch) if takes else body()
    except AssertionError as error:
        return seed, (str(error).splitlines() or ["AssertionError"])[0][:160]
    except Exception as error:  # a scenario that did not arise may fail any way
        return seed, f"{type(error).__name__}: {str(error)[:140]}"
    return seed, None


def scan(target: Target, seeds: Iterator[int], jobs: int, want: int) -> list[int]:
    """Run ``seeds`` over ``jobs`` processes until ``want`` pass (reported smallest first)."""
    found: list[int] = []
    done = 0
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        running: set[Future[tuple[int, str | None]]] = set()
        for seed in seeds:
            running.add(pool.submit(attempt, target, seed))
            if len(running) < jobs * 2:
                continue
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            done += report(finished, found, done, started)
            if len(found) >= want:
                break
        finished, _ = wait(running)
        report(finished, found, done, started)
    return sorted(found)


def report(
    finished: set[Future[tuple[int, str | None]]], found: list[int], done: int, started: float
) -> int:
    """Print each finished seed's outcome; collect the passing ones into ``found``."""
    for future in finished:
        seed, why = future.result()
        done += 1
        if why is None:
            found.append(seed)
            print(f"seed {seed}: passes ({done} run, {time.monotonic() - started:.0f}s)")
        elif done % 25 == 0:
            print(f"{done} run, {time.monotonic() - started:.0f}s; seed {seed}: {why}")
        sys.stdout.flush()
    return len(finished)


def main() -> None:
    sys.path.insert(0, str(Path.cwd()))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test_id")
    parser.add_argument("--pin", type=int, help="the pinned seed to replace")
    parser.add_argument("--constant", help="a module global that holds the seed")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2))
    parser.add_argument("--want", type=int, default=1, help="stop after this many pass")
    args = parser.parse_args()
    target = Target.parse(args.test_id, args.pin, args.constant)
    started = time.monotonic()
    seeds = iter(range(args.first, args.first + args.count))
    found = scan(target, seeds, args.jobs, args.want)
    seconds = time.monotonic() - started
    span = f"{args.first}-{args.first + args.count - 1}"
    print(f"smallest: {found[0] if found else None} (found {found}; {span}; {seconds:.0f}s)")


if __name__ == "__main__":
    main()
