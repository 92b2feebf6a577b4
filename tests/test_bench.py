"""The benchmarks' shared measuring rules (scripts/benchenv.py) and the
figures scripts/bench.py reads from them: no benchmark figure is run here,
only what makes one trustworthy."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench  # noqa: E402
import benchenv  # noqa: E402


def test_sides_alternate_and_each_runs_after_a_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(os, "sync", lambda: events.append("sync"))
    sides = [benchenv.Side(name, lambda k, name=name: events.append(f"{name}{k}"),
                           before=lambda k, name=name: events.append(f"before-{name}{k}"),
                           after=lambda k, name=name: events.append(f"after-{name}{k}"))
             for name in ("a", "b", "c")]
    times = benchenv.alternating(sides, 4)
    assert {name: len(values) for name, values in times.items()} == {"a": 4, "b": 4, "c": 4}
    timed = [e for e in events if e[0] in "abc" and e[1:].isdigit()]
    # The order rotates, so every side runs first in some round.
    assert timed == ["a0", "b0", "c0", "b1", "c1", "a1", "c2", "a2", "b2", "a3", "b3", "c3"]
    # Each timed side comes right after its own setup and a sync, never
    # straight after another side's work.
    for name in timed:
        at = events.index(name)
        assert events[at - 2:at] == [f"before-{name}", "sync"]
        assert events[at + 1] == f"after-{name}"


def test_fewer_than_four_rounds_are_refused() -> None:
    with pytest.raises(SystemExit, match="at least 4 rounds"):
        benchenv.alternating([benchenv.Side("a", lambda k: None)], 3)


def test_figures_carry_their_spread_to_bench_py(capsys: pytest.CaptureFixture[str]) -> None:
    line = benchenv.figure("spawn_ratio_n4", benchenv.ratios([1.0, 3.0, 2.0, 1.2], [2.0, 4.0, 2.0, 2.0]))
    assert capsys.readouterr().out == line + "\n"
    assert line == "spawn_ratio_n4: 0.68 (min 0.50 max 1.00, 4 rounds)"
    name, value, spread = bench.FIGURE.match(line).groups()  # type: ignore[union-attr]
    assert (name, value) == ("spawn_ratio_n4", "0.68")
    assert bench.judge(name, value, spread) == (
        "spawn_ratio_n4: 0.68 (min 0.50 max 1.00, 4 rounds) (target <= 0.7) PASS")
    assert bench.judge("spawn_ratio_n8", "0.71").endswith("MISS")
    # Prose is no figure.
    for prose in ("target: <= 50 ms (met)", "load average at start: 1.00 0.50 0.20 (2 cores)",
                  "repetition 1: ours 3 ms"):
        assert bench.FIGURE.match(prose) is None


def test_every_target_is_printed_by_some_benchmark() -> None:
    scripts = Path(bench.__file__).resolve().parent
    text = "".join(p.read_text() for p in scripts.glob("bench_*.py"))
    for name in bench.TARGETS:
        stem = name.removesuffix("_n4").removesuffix("_n8")
        assert stem in text, f"no benchmark prints {name}"


SCRIPTS = Path(bench.__file__).resolve().parent
# Each benchmark with the arguments that keep its smoke run short.
SMOKE_ARGS = {
    "bench.py": ["bench_evidence"], "bench_check.py": ["--check-only"], "bench_evidence.py": ["--repeat", "4"],
    "bench_hooks.py": ["--files", "20", "--changed", "5", "--rounds", "4"], "bench_pick.py": ["--rounds", "4"],
    "bench_real.py": ["--rounds", "4", "--merges", "2"],
    "bench_remote.py": [], "bench_run.py": [], "bench_selection.py": ["--tasks", "2", "--jobs", "1"],
    "bench_spawn.py": ["--case", "n4"], "bench_start.py": ["--rounds", "4"],
    "bench_stream.py": ["--toy", "20", "--rounds", "4"],
}


def _bench_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPTS.parent), os.environ.get("PYTHONPATH", "")]))


def test_every_benchmark_has_smoke_arguments() -> None:
    assert sorted(SMOKE_ARGS) == sorted(["bench.py"] + [p.name for p in SCRIPTS.glob("bench_*.py")])


@pytest.mark.parametrize("script", sorted(SMOKE_ARGS))
@pytest.mark.slow  # seconds to a minute each (bench_remote); CI runs the slow tier after the default one
def test_every_benchmark_runs_at_toy_sizes_and_prints_its_figures(script: str) -> None:
    """GIT_PARALLEL_BENCH_SMOKE=1 (benchenv.sized): every side runs for
    real on toy repositories, the rounds alternate, and figure lines come
    out in the form bench.py reads."""
    import subprocess

    env = dict(_bench_env(), GIT_PARALLEL_BENCH_SMOKE="1")
    out = subprocess.run([sys.executable, str(SCRIPTS / script), *SMOKE_ARGS[script]], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("load average at start: ") for line in lines) or script == "bench_selection.py"
    figures = [m for m in map(bench.FIGURE.match, lines) if m]
    assert figures, out.stdout


@pytest.mark.parametrize("script", sorted(SMOKE_ARGS))
def test_every_benchmark_starts(script: str) -> None:
    """``--help`` imports everything a benchmark uses (a module moved under
    it fails here, not in the next benchmark run) and measures nothing."""
    import subprocess

    out = subprocess.run([sys.executable, str(SCRIPTS / script), "--help"], capture_output=True, text=True,
                         env=_bench_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout
