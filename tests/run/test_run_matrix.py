"""`emulator run` on a profile with a matrix runs every combination into its own results directory."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.results import read_results


def test_matrix_runs_every_combination(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    profile = tiny_profile(matrix={"fabric.ports.rate": ["10Gbps", "25Gbps"], "seed": [1, 2]})
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    dirs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(dirs) == 4
    rates = sorted(read_results(d).doc["profile"]["fabric"]["ports"]["rate"] for d in dirs)
    assert rates == [10**10, 10**10, 25 * 10**9, 25 * 10**9]
    assert all(read_results(d).doc["complete"] for d in dirs)
    assert "sweep of 4 runs" in printed and "emulator compare" in printed
    assert all("[" not in d.name for d in dirs)


def test_matrix_exit_code_is_the_worst_run(tiny_profile, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    # the SLO holds at 25 Gb/s and breaks at 10 Mb/s
    profile = tiny_profile(matrix={"fabric.ports.rate": ["25Gbps", "10Mbps"]}, slo=["all_reduce.cct.p99 < 5ms"])
    assert main(["run", str(profile), "-o", str(out), "--quiet"]) == 1
    printed = capsys.readouterr().out
    assert "SLO broken" in printed and printed.count(" ok ") >= 1


@pytest.mark.serial  # --jobs 2: worker processes of its own
def test_jobs_gives_the_serial_results(tiny_profile, tmp_path: Path, capsys) -> None:
    profile = tiny_profile(matrix={"fabric.ports.rate": ["10Gbps", "25Gbps"], "seed": [1, 2]})
    assert main(["run", str(profile), "-o", str(tmp_path / "serial"), "--quiet"]) == 0
    assert main(["run", str(profile), "-o", str(tmp_path / "par"), "--quiet", "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "sweep of 4 runs (4 ran)" in printed
    serial = sorted(p.name for p in (tmp_path / "serial").iterdir() if p.is_dir())
    par = sorted(p.name for p in (tmp_path / "par").iterdir() if p.is_dir())
    assert serial == par and len(par) == 4
    for name in par:
        a, b = read_results(tmp_path / "serial" / name), read_results(tmp_path / "par" / name)
        assert a.doc["complete"] and b.doc["complete"]
        assert a.csv("flows") == b.csv("flows")
        assert a.csv("collectives") == b.csv("collectives")


def test_jobs_must_be_positive(tiny_profile, tmp_path: Path, capsys) -> None:
    profile = tiny_profile(matrix={"seed": [1, 2]})
    with pytest.raises(SystemExit) as exc:
        main(["run", str(profile), "-o", str(tmp_path / "x"), "--jobs", "0"])
    assert exc.value.code == 2
    assert "--jobs must be an integer >= 1" in capsys.readouterr().err


def test_slurm_array_script_runs_each_combination_into_one_folder(tiny_profile, tmp_path: Path, capsys,
                                                                   monkeypatch) -> None:  # fmt: skip
    profile = tiny_profile(matrix={"seed": [1, 2, 5]})
    base = tmp_path / "sweep"
    script = tmp_path / "array.sh"
    assert main(["run", str(profile), "-o", str(base), "--emit-slurm-array", str(script),
                 "--set", "iterations=1"]) == 0  # fmt: skip
    text = script.read_text()
    assert "#SBATCH --array=0-2" in text and '--combination "$SLURM_ARRAY_TASK_ID"' in text
    assert "--set iterations=1" in text and f"-o {base}" in text
    assert base.is_dir() and not any(base.iterdir())  # nothing ran
    assert "sbatch" in capsys.readouterr().out
    # what each array task runs: the script's command with the task id
    cmd = text.strip().splitlines()[-1]
    argv = shlex.split(cmd.replace('"$SLURM_ARRAY_TASK_ID"', "TASK"))
    assert argv[0] == "exec" and argv[2:5] == ["-m", "emulator", "run"]
    for task in range(3):
        assert main([a if a != "TASK" else str(task) for a in argv[4:]]) == 0
    dirs = sorted(p for p in base.iterdir() if p.is_dir())
    assert len(dirs) == 3
    assert sorted(read_results(d).doc["seed"] for d in dirs) == [1, 2, 5]
    assert all(read_results(d).doc["iterations"]["measured"] == 1 for d in dirs)
    assert main(["compare", *map(str, dirs)]) == 0


def test_combination_out_of_range_is_one_error(tiny_profile, tmp_path: Path, capsys) -> None:
    profile = tiny_profile(matrix={"seed": [1, 2]})
    assert main(["run", str(profile), "-o", str(tmp_path / "x"), "--combination", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --combination 2:") and "2 combinations" in err


@pytest.mark.serial  # worker processes of its own
def test_a_stopped_parallel_sweep_starts_no_queued_combination(tiny_profile, tmp_path: Path) -> None:
    """Ctrl-C (or an interrupted run) ends a --jobs sweep; the combinations the pool had already queued to its
    workers could not be cancelled and ran to the end after it (measured: 3 runs, 17 s, after a Ctrl-C)."""
    from emulator.config import load_profiles
    from emulator.run.sweep import _parallel
    from emulator.stats.stragglers import DEFAULT_SLOW_FACTOR

    profiles = load_profiles(tiny_profile(matrix={"seed": [1, 2, 3, 4, 5, 6]}), env={})
    runs = _parallel(profiles, tmp_path, 1, None, DEFAULT_SLOW_FACTOR)
    first = next(runs)
    runs.close()  # the consumer stops here, as run_sweep does at an interrupted run
    assert first.exit_code == 0
    ran = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(ran) <= 2, sorted(p.name for p in ran)  # the first, and at most the one already started
