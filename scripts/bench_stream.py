#!/usr/bin/env python3
"""Benchmark: what a gate's results channel (judge/stream) costs a real
test suite.

Both sides run the same pytest command in the same folder with the same
interpreter, one after the other, alternating which goes first
(benchenv.alternating):

* plain: the command as the project runs it;
* streamed: with the channel's environment (its folder first on
  ``PYTHONPATH``, ``PYTHONSAFEPATH``, ``PYTEST_PLUGINS`` naming the plugin)
  and its pipe open, drained by git-parallel's reading thread, as a gate
  runs it.

No sandbox and no checkout on either side: only the channel is measured.
It prints each pair and

    stream_ratio: R   (streamed / plain, median of the pairs' ratios)
    stream_added_ms: A   (streamed - plain)
    stream_cpu_ratio: C   (the same of the CPU seconds the test process used)
    streamed_tests: N   (tests the last streamed run reported)

With ``--callgrind`` each side runs once under valgrind's callgrind instead
and it prints their instruction counts and ``stream_instructions_ratio``:
on a shared machine whose wall and CPU times vary by a third from run to
run, the one figure that can show a cost of 2 %.

Usage: bench_stream.py [--rounds N] FOLDER -- PYTHON -m pytest [ARG...]
(the issue's target: at most 1.02 on a real suite), or ``--toy N``: a
folder of N trivial tests run by this Python's pytest (a smoke run whose
figures say little: the plugin's cost per test, not a suite's).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import benchenv

sys.path.insert(0, str(benchenv.ROOT))

from gitflow_parallel.judge import stream  # noqa: E402


def toy(tests: int) -> tuple[Path, list[str]]:
    folder, _ = benchenv.workspace("bench-stream-")
    body = "".join(f"def test_{k}():\n    assert {k} == {k}\n\n\n" for k in range(tests))
    (folder / "test_toy.py").write_text(body)
    return folder, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_toy.py"]


def callgrind(folder: Path, command: list[str]) -> None:
    """Both sides once under callgrind (the test process only), side by
    side on the two cores: instruction counts do not depend on the load."""
    out = Path(tempfile.mkdtemp(prefix="bench-stream-cg-"))
    env = dict(os.environ)
    channel = stream.open_channel()
    sides = {}
    for name, extra in (("plain", {}), ("streamed", channel.env(env))):
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out / name}", *command]
        sides[name] = subprocess.Popen(argv, cwd=folder, env={**env, **extra}, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True, pass_fds=(channel.write_fd,))
    counts = {}
    for name, proc in sides.items():
        _, err = proc.communicate()
        found = re.findall(r"Collected : (\d+)", err)
        if not found:
            raise SystemExit(f"callgrind said no count for {name}: {err[-400:]}")
        counts[name] = int(found[-1])
        print(f"{name}_instructions: {counts[name]}", flush=True)
    result = channel.result()
    channel.close()
    print(f"stream_instructions_ratio: {counts['streamed'] / counts['plain']:.4f}", flush=True)
    print(f"streamed_tests: {sum(len(s.tests) for s in result.sessions)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="?")
    parser.add_argument("--rounds", type=int, default=benchenv.ROUNDS)
    parser.add_argument("--toy", type=int, metavar="N", help="N trivial tests instead of a real suite")
    parser.add_argument("--callgrind", action="store_true",
                        help="each side once under valgrind's callgrind: instructions, which load does not change")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.toy:
        args.folder, command = toy(args.toy)
    if not command or args.folder is None:
        raise SystemExit("give a folder and the test command after --, or --toy N")
    if args.callgrind:
        callgrind(args.folder, command)
        return
    benchenv.print_load()
    env = dict(os.environ)
    streamed_counts: list[int] = []

    def plain(_: int) -> None:
        subprocess.run(command, cwd=args.folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def streamed(_: int) -> None:
        channel = stream.open_channel()
        try:
            subprocess.run(command, cwd=args.folder, env={**env, **channel.env(env)}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, pass_fds=(channel.write_fd,))
            result = channel.result()
            streamed_counts.append(sum(len(s.tests) for s in result.sessions))
        finally:
            channel.close()

    cpu: dict[str, list[float]] = {}
    times = benchenv.alternating([benchenv.Side("plain", plain), benchenv.Side("streamed", streamed)], args.rounds,
                                 cpu=cpu)
    for k, (a, b) in enumerate(zip(times["plain"], times["streamed"])):
        print(f"pair {k}: plain {a:.3f}s streamed {b:.3f}s", flush=True)
    benchenv.figure("stream_ratio", benchenv.ratios(times["streamed"], times["plain"]), 3)
    benchenv.figure("stream_added_ms", benchenv.differences_ms(times["streamed"], times["plain"]), 0)
    # CPU seconds of the test process: what a loaded machine's wall times hide.
    benchenv.figure("stream_cpu_ratio", benchenv.ratios(cpu["streamed"], cpu["plain"]), 3)
    print(f"streamed_tests: {streamed_counts[-1] if streamed_counts else 0}", flush=True)


if __name__ == "__main__":
    main()
