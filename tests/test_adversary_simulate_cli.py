"""Adversarial tests of ``lakelock simulate`` as a user runs it (README, "Sizing a lake"): a
store that answers in no time, mixes of nothing, a plot that cannot be written. Each is one
line saying what is wrong, before the run: never a run that cannot end, a bare ValueError
that names no option, or minutes of simulation lost to the plot's error after them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests._support.processes import InProcess

QUICK = ("--writers", "1", "--seconds", "0.2", "--store", "fixed:20", "--no-progress")


def test_a_store_answering_in_no_time_is_a_usage_error(in_process: InProcess) -> None:
    """``--store fixed:0``: every request took no virtual time, so the run's clock never
    reached ``--seconds`` and the command never returned (a 0.2 s run ran past minutes)."""
    result = in_process("simulate", "--writers", "1", "--seconds", "0.2", "--store", "fixed:0")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "lakelock simulate: error: argument --store: fixed:<ms> needs milliseconds > 0, "
        "got 'fixed:0'"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ("--mix", "append=0"),
            "invalid --mix 'append=0': no kind of commit has a weight > 0",
        ),
        (
            ("--mix", "append=0", "--mix", "overwrite=0"),
            "invalid --mix 'append=0,overwrite=0': no kind of commit has a weight > 0",
        ),
        (
            ("--faults", "0.1", "--fault-mix", "throttle=0"),
            "invalid --fault-mix 'throttle=0': no fault kind has a weight > 0",
        ),
    ],
)
def test_a_mix_of_nothing_is_a_usage_error_naming_its_option(
    in_process: InProcess, argv: tuple[str, ...], line: str
) -> None:
    """Weights summing to 0 were an error of status 1 that named no option ("a mix needs a
    kind of commit with a weight > 0"), where every other malformed value of an option is a
    usage error (2) naming it."""
    result = in_process("simulate", *QUICK, *argv)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"lakelock simulate: error: {line}"]
    assert result.stdout == ""


def test_a_mix_with_a_kind_of_weight_is_run(in_process: InProcess) -> None:
    """A weight of 0 beside one above it is a mix (the kinds not named get 0 anyway)."""
    result = in_process("simulate", *QUICK, "--mix", "append=0", "--mix", "overwrite=1")
    assert result.returncode == 0, result.stderr


def test_a_plot_that_cannot_be_written_is_said_before_the_run(
    in_process: InProcess, tmp_path: Path
) -> None:
    """``--plot`` into a folder that does not exist was found after the whole run, its
    figures lost with the error; now it is refused first, and nothing is left behind."""
    pytest.importorskip("matplotlib")
    trace = tmp_path / "trace.jsonl"
    missing = tmp_path / "no-such-folder" / "run.png"
    result = in_process("simulate", *QUICK, "--trace", str(trace), "--plot", str(missing))
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("lakelock: error: invalid --plot ")
    assert line.endswith(f"cannot be written: {os.strerror(2)}")
    assert not trace.exists() or trace.read_bytes() == b""  # no run happened
    assert not missing.parent.exists()


def test_a_plot_path_that_is_a_folder_is_refused_and_a_file_kept_as_it_was(
    in_process: InProcess, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    result = in_process("simulate", *QUICK, "--plot", str(tmp_path))
    assert result.returncode == 1
    assert "cannot be written: Is a directory" in result.stderr
    checked = tmp_path / "fresh.png"
    assert in_process("simulate", *QUICK, "--plot", str(checked)).returncode == 0
    assert checked.read_bytes().startswith(b"\x89PNG")
