"""The HTML report, loaded in a real browser: headless Chromium renders the
page and the test reads the rendered DOM and keeps a screenshot."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import GP, make_repo
from test_review_share import config, three_attempts, tools

CHROMIUM = shutil.which("chromium")


class Attempts(HTMLParser):
    """Collects the attempt columns, their gates and winner marks."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: list[dict] = []
        self.current: dict | None = None
        self.depth = 0
        self.in_mark = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and "attempt" in (a.get("class") or "").split():
            self.current = {"id": a["data-attempt"], "winner": a["data-winner"] == "true",
                            "class": a["class"], "gates": {}, "marks": []}
            self.attempts.append(self.current)
            self.depth = 0
        if self.current is None:
            return
        if tag == "section":
            self.depth += 1
        if tag == "li" and a.get("data-gate"):
            self.current["gates"][a["data-gate"]] = a["data-result"]
        self.in_mark = a.get("data-role") == "winner-mark"

    def handle_endtag(self, tag: str) -> None:
        if self.current is not None and tag == "section":
            self.depth -= 1
            if self.depth == 0:
                self.current = None

    def handle_data(self, data: str) -> None:
        if self.in_mark and self.current is not None:
            self.current["marks"].append(data)
            self.in_mark = False


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           "--no-first-run", f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="needs Debian's chromium (`.ci/run` installs it)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    t = tools(tmp_path)
    repo = make_repo(tmp_path / "repo", files={"README.md": "hello\n", "app.py": "def f():\n    return 1\n"},
                     config=config(t))
    gp = GP(repo)
    run = three_attempts(gp, t)
    landed = gp.json("merge", "t")["merge"]["landed"]
    page = tmp_path / "report.html"
    out = gp.json("report", "t", "--html", str(page))
    assert out["path"] == str(page.resolve())

    text = page.read_text()
    # Self-contained: nothing to fetch, nothing to run.
    assert not re.search(r"https?://|<script|<link|\bsrc=|@import|url\(", text, re.I)
    assert 'class="highlight"' in text  # pygments did the diff

    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr
    parsed = Attempts()
    parsed.feed(dom.stdout)
    assert [a["id"] for a in parsed.attempts] == ["1", "2", "3"]
    assert [a["winner"] for a in parsed.attempts] == [True, False, False]
    assert parsed.attempts[0]["marks"] == ["winner"] and "winner" in parsed.attempts[0]["class"].split()
    assert [a["gates"] for a in parsed.attempts] == [{"sum": "pass"}, {"sum": "pass"}, {"sum": "fail"}]
    assert f'data-landed="{landed}"' in dom.stdout and run["run_id"] in dom.stdout
    assert dom.stdout.count("<svg") == 2  # the two charts

    shot = tmp_path / "report.png"
    taken = chromium(f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri(), profile=tmp_path / "profile-shot")
    assert taken.returncode == 0, taken.stderr
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a page, not a blank
