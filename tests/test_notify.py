"""``notify:``: the configured command reads one JSON event on stdin per
finished attempt, per failing gate verdict, when every attempt is done and
when the run lands; one that hangs or fails is a warning and changes no
outcome.  Real git, real agents, gates and notify commands (python scripts)."""

from __future__ import annotations

import json
import re
import shutil
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import GP, git, make_repo
import scenarios

from gitflow_parallel import config
from gitflow_parallel.errors import ParallelError

PY = sys.executable

AGENT = textwrap.dedent("""
    import pathlib, sys
    for arg in sys.argv[1:]:
        name, _, content = arg.partition("=")
        pathlib.Path(name).write_text(content)
""")
GATE = textwrap.dedent("""
    import pathlib, sys
    sys.exit(0 if sum(int(p.read_text()) for p in pathlib.Path(".").glob("*.num")) <= 10 else 1)
""")
# Appends what it read, where it ran and the GIT_* variables it got; then
# does what tools/mode says (hang, fail, or nothing).
NOTIFY = textwrap.dedent("""
    import json, os, pathlib, sys, time
    tools = pathlib.Path(__file__).parent
    event = sys.stdin.read()
    line = {"event": json.loads(event), "lines": event.count("\\n"), "cwd": os.getcwd(), "pid": os.getpid(),
            "git_env": sorted(k for k in os.environ if k.startswith("GIT_"))}
    with open(tools / "received.jsonl", "a") as out:
        out.write(json.dumps(line) + "\\n")
    mode = (tools / "mode").read_text().strip() if (tools / "mode").exists() else ""
    if mode == "hang":
        time.sleep(120)
    sys.exit(5 if mode == "fail" else 0)
""")


def project(tmp_path: Path, notify: str) -> tuple[Path, GP, Path]:
    tools = tmp_path / "tools"
    command = f"[{PY}, {tools / 'notify.py'}]"
    extra = f"notify: {notify.format(notify=command)}\n"
    repo, gp = scenarios.project(tmp_path, GATE, name="sum", extra=extra, agent=AGENT)
    (tools / "notify.py").write_text(NOTIFY)
    return repo, gp, tools


def received(tools: Path) -> list[dict[str, Any]]:
    path = tools / "received.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def events(tools: Path, kind: str | None = None) -> list[dict[str, Any]]:
    return [r["event"] for r in received(tools) if kind is None or r["event"]["kind"] == kind]


def agent(gp: GP, tools: Path, inst: str, *args: str, code: int = 0) -> None:
    gp("run", "t", "--instance", inst, "--", PY, str(tools / "agent.py"), *args, code=code)


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_notify_gets_each_attempt_a_failing_verdict_all_done_and_the_landing(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path, "{notify}")
    run_id = gp.json("spawn", "t", "-n", "3")["run_id"]
    agent(gp, tools, "1", "a.num=3")
    agent(gp, tools, "2", "a.num=20")  # passes run, fails the gate
    assert [e["kind"] for e in events(tools)] == ["attempt_finished", "attempt_finished"]  # 3 is pending
    ran = gp("run", "t", "--instance", "3", "--", PY, "-c", "import sys; sys.exit(3)", code=1)
    assert "(failed or aborted: 3)" in ran.stdout, ran.stdout

    finished = events(tools, "attempt_finished")
    status = gp.json("status", "t")["run"]
    heads = {i["id"]: i["head"] for i in status["instances"]}
    assert [(e["instance"], e["status"], e["exit_code"], e["attempt"]) for e in finished] == [
        ("1", "succeeded", 0, 0), ("2", "succeeded", 0, 0), ("3", "failed", 3, 0)]
    assert [e["commit"] for e in finished] == [heads["1"], heads["2"], heads["3"]]
    done = events(tools, "all_done")
    assert len(done) == 1 and done[0]["counts"] == {"succeeded": 2, "failed": 1}
    assert [(i["instance"], i["status"]) for i in done[0]["instances"]] == [
        ("1", "succeeded"), ("2", "succeeded"), ("3", "failed")]

    assert "FAIL sum" in gp("check", "t", code=1).stdout  # instance 2's verdict is fail
    failed = events(tools, "gates_failed")
    assert [(e["instance"], e["verdict"], e["failed"], e["commit"]) for e in failed] == [
        ("2", "fail", ["sum"], heads["2"])]

    gp("pick", "t")
    gp("merge", "t")
    landed = events(tools, "landed")
    tip = git(repo, "rev-parse", "main")
    assert len(landed) == 1 and landed[0]["commit"] == tip
    assert [(w["instance"], w["commit"]) for w in landed[0]["winners"]] == [("1", heads["1"])]

    everything = received(tools)
    assert len(everything) == 6  # 3 finished, all done, 1 failing verdict, the landing
    for r in everything:
        assert r["event"]["v"] == 1 and r["event"]["task"] == "t" and r["event"]["run_id"] == run_id
        assert r["event"]["base"] == "refs/heads/main" and r["lines"] == 1
        assert Path(r["cwd"]) == repo.resolve()
        # The scrubbed environment: the suite's GIT_PARALLEL_SANDBOX, GIT_DIR
        # and the like never reach it; only the scope every command carries.
        assert [k for k in r["git_env"] if k.startswith("GIT_PARALLEL_")] == ["GIT_PARALLEL_SCOPE"]
        assert "GIT_DIR" not in r["git_env"]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_a_notify_that_hangs_or_fails_is_a_warning_and_changes_nothing(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path, "{{command: {notify}, timeout: 0.5}}")
    gp("spawn", "t", "-n", "2")
    (tools / "mode").write_text("hang")
    t0 = time.monotonic()
    ran = gp("run", "t", "--instance", "1", "--", PY, str(tools / "agent.py"), "a.num=3")
    took = time.monotonic() - t0
    assert "warning: notify on attempt_finished:" in ran.stderr and "was stopped" in ran.stderr
    assert took < 30, took  # the timeout (0.5 s) and the kill grace, not the 120 s it would hang
    assert [i["status"] for i in gp.json("status", "t")["run"]["instances"]] == ["succeeded", "pending"]
    hung = received(tools)
    assert len(hung) == 1 and _gone(hung[0]["pid"])

    (tools / "mode").write_text("fail")
    out = json.loads(gp("run", "t", "--instance", "2", "--json", "--", PY, str(tools / "agent.py"), "b.num=20").stdout)
    assert out["counts"]["succeeded"] == 1
    assert sorted(w.split(":")[0] for w in out["notify_warnings"]) == ["notify on all_done",
                                                                       "notify on attempt_finished"]
    assert all("exited 5" in w for w in out["notify_warnings"])

    checked = gp("check", "t", code=1)  # the verdict is the gates', whatever notify says
    assert "warning: notify on gates_failed:" in checked.stderr and "exited 5" in checked.stderr
    verdicts = {i["id"]: i["verdict"] for i in gp.json("status", "t")["run"]["instances"]}
    assert verdicts == {"1": "pass", "2": "fail"}

    gp("pick", "t")
    merged = gp("merge", "t")
    assert "warning: notify on landed:" in merged.stderr
    assert git(repo, "show", "main:a.num") == "3"
    assert gp.json("status", "t")["run"]["status"] == "merged"
    # Each event's command starts at once, so those of one verb may arrive in any order.
    assert sorted(e["kind"] for e in events(tools)) == ["all_done", "attempt_finished", "attempt_finished",
                                                        "gates_failed", "landed"]


def test_a_notify_that_cannot_start_is_a_warning(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path, "[no-such-notifier-here]")
    gp("spawn", "t", "-n", "1")
    out = json.loads(gp("run", "t", "--json", "--", PY, str(tools / "agent.py"), "a.num=1").stdout)
    assert out["counts"]["succeeded"] == 1
    assert len(out["notify_warnings"]) == 2 and all("command not found" in w for w in out["notify_warnings"])


@pytest.mark.parametrize("value, key, problem", [
    ("notify: 42", "notify", "must be a command"),
    ("notify: {command: [x], timeout: 0}", "notify.timeout", "must be a number of seconds"),
    ("notify: {command: [x], timeout: 301}", "notify.timeout", "must be a number of seconds"),
    ("notify: {timeout: 3}", "notify", "must be a command"),
    ("notify: {command: [x], when: all}", "notify", "must be a command"),
    ("notify: []", "notify.command", "must not be empty"),
])
def test_the_notify_key_is_checked(value: str, key: str, problem: str) -> None:
    with pytest.raises(ParallelError) as caught:
        config.parse(value)
    assert caught.value.code == "PARALLEL_CONFIG_INVALID"
    assert re.search(rf"^\.gitparallel\.yaml: {re.escape(key)}( \(line \d+\))?: {problem}", caught.value.message)


def test_the_notify_key_defaults() -> None:
    assert config.parse("notify: [notify-send, parallel]")["notify"] == {
        "command": ["notify-send", "parallel"], "timeout": 10}
    assert config.parse("notify: 'curl -sS -d @- https://example.invalid/hook'")["notify"]["command"][0] == "curl"
    assert "notify" not in config.parse("instances: 2")  # a run frozen before the key existed still matches


DOCS = Path(__file__).resolve().parent.parent / "docs" / "notify.md"


def recipes() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)


def test_every_recipe_in_the_docs_is_a_valid_config() -> None:
    assert len(recipes()) == 4
    for text in recipes():
        assert config.parse(text)["notify"]["command"]


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_the_bell_recipe_rings_when_all_is_done(tmp_path: Path) -> None:
    bell = next(r for r in recipes() if "printf" in r)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "agent.py").write_text(AGENT)
    repo = make_repo(tmp_path / "repo", config=bell)
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    first = gp("run", "t", "--instance", "1", "--", PY, str(tools / "agent.py"), "a.num=1")
    last = gp("run", "t", "--instance", "2", "--", PY, str(tools / "agent.py"), "a.num=2")
    assert "\a" not in first.stderr and last.stderr.count("\a") == 1
    assert "warning" not in first.stderr + last.stderr


def test_the_webhook_recipe_posts_the_event(tmp_path: Path) -> None:
    """The curl recipe against a real HTTP server on localhost."""
    import http.server
    import threading

    if not shutil.which("curl") or not shutil.which("jq"):
        pytest.skip("needs curl and jq")
    posted: list[bytes] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            posted.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tools = tmp_path / "tools"
        tools.mkdir()
        (tools / "agent.py").write_text(AGENT)
        repo = make_repo(tmp_path / "repo", config=next(r for r in recipes() if "curl" in r))
        gp = GP(repo)
        gp("spawn", "t", "-n", "1")
        out = gp("run", "t", "--", PY, str(tools / "agent.py"), "a.num=1",
                 env={"WEBHOOK_URL": f"http://127.0.0.1:{server.server_address[1]}/hook"})
    finally:
        server.shutdown()
    assert "warning" not in out.stderr
    assert sorted(json.loads(p)["text"] for p in posted) == ["git parallel t: all_done  ",
                                                             "git parallel t: attempt_finished 1 succeeded"]
