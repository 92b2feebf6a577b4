"""The HTML report, loaded in a real browser: headless Chromium renders the
page and the test reads the rendered DOM and keeps a screenshot."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import GP, make_repo
from test_review_share import config, three_attempts, tools

CHROMIUM = shutil.which("chromium")
PY = sys.executable


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


def rendered(page: Path, tmp_path: Path) -> str:
    """The page as the browser built it (headless Chromium's DOM), or its
    text where no Chromium is installed."""
    if CHROMIUM is None:
        return page.read_text()
    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / f"profile-{page.stem}")
    assert dom.returncode == 0, dom.stderr
    return dom.stdout


class Page(HTMLParser):
    """Texts of the elements that carry a given data-* attribute, by its value."""

    def __init__(self, attr: str) -> None:
        super().__init__()
        self.attr, self.stack, self.found = attr, [], {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "meta", "rect"):
            return
        value = dict(attrs).get(self.attr)
        self.stack.append(value)
        if value is not None:
            self.found.setdefault(value, "")

    def handle_endtag(self, tag: str) -> None:
        if self.stack and tag not in ("br", "meta", "rect"):
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        for value in {v for v in self.stack if v is not None}:
            self.found[value] += data


def texts(dom: str, attr: str) -> dict[str, str]:
    parser = Page(attr)
    parser.feed(dom)
    return parser.found


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_report_says_the_rule_that_picked_the_losers_own_evidence_and_earlier_attempts(tmp_path: Path) -> None:
    t = tools(tmp_path)
    repo = make_repo(tmp_path / "repo", files={"README.md": "hello\n"}, config=config(t))
    gp = GP(repo)
    three_attempts(gp, t)  # 1 passes (score 7), 2 passes (score 5), 3 fails: picked 1
    gp("unpick", "t")
    gp("retry", "t", "3")
    gp("run", "t", "--instance", "3", "--", PY, str(t / "agent.py"), "a.num=4")
    gp("check", "t", "--instance", "3")
    gp("pick", "t")
    page = tmp_path / "rule.html"
    gp("report", "t", "--html", str(page))
    dom = rendered(page, tmp_path)
    assert "earliest proof" not in dom and "fewest changed lines" in dom
    rule = texts(dom, "data-role")["rule"]
    assert "highest score, then fewest changed lines against the base, then id" in rule
    assert "decided by score: 1 (score 7, 1 changed lines) over 3 (score 6, 1 changed lines)" in rule
    losers = texts(dom, "data-standing")
    assert set(losers) == {"passed"}  # 2 and 3 passed; they were ranked below, not failed
    assert "PARALLEL_DEV_SELECTION_NO_PASS" not in texts(dom, "data-losers")["2"]
    earlier = texts(dom, "data-earlier-attempt")
    assert list(earlier) == ["0"] and "verdict fail" in earlier["0"] and "sum 20" in earlier["0"]
    assert 'data-earlier-attempt="0" data-verdict="fail"' in dom
    assert "refs/parallel/archive/" in earlier["0"]

    # A person's pick: no rule, the person and the reason once, losers as they stand.
    gp("unpick", "t")
    reason = "the retried attempt reads best; the reviewers asked for it in the design meeting"
    gp("pick", "t", "--instance", "3", "--reason", reason)
    gp("report", "t", "--html", str(page))
    dom = rendered(page, tmp_path)
    rule = texts(dom, "data-role")["rule"]
    assert rule.startswith("chosen by ") and reason in rule and "highest score" not in rule
    assert dom.count(reason) == 1
    rows = texts(dom, "data-losers")
    assert list(rows) == ["1 2"] and "not chosen" in rows["1 2"]
    assert "PARALLEL_DEV_SELECTION_NO_PASS" not in dom


CALC_TESTS = textwrap.dedent("""
    import pytest

    import calc


    @pytest.mark.parametrize("n", range(120))
    def test_double_of_a_number_is_that_number_added_to_itself_for_every_small_integer(n):
        assert calc.double(n) == n + n
""")


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_report_cards_show_the_test_summary_and_every_failing_test(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text("import pathlib, sys\npathlib.Path('calc.py').write_text(sys.argv[1] + '\\n')\n")
    repo = make_repo(tmp_path / "repo", files={"tests/test_calc.py": CALC_TESTS, "calc.py": "def double(n): pass\n"},
                     config=textwrap.dedent(f"""
                         gates:
                           - name: tests
                             run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]
                     """))
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "1", "--", PY, str(agent), "def double(n): return 2 * n")
    gp("run", "t", "--instance", "2", "--", PY, str(agent), "def double(n): return 2 * n + n % 4 // 3")
    assert "FAIL tests" in gp("check", "t", code=1).stdout
    page = tmp_path / "tests.html"
    gp("report", "t", "--html", str(page))
    gates = Attempts()
    dom = rendered(page, tmp_path)
    gates.feed(dom)
    assert [a["gates"] for a in gates.attempts] == [{"tests": "pass"}, {"tests": "fail"}]
    cards = texts(dom, "data-attempt")  # each card, then its diff
    passing = cards["1"]
    assert re.search(r"120 passed in [\d.]+s", passing), passing
    assert "....." not in passing  # no progress dots
    failing = cards["2"]
    assert re.search(r"30 failed, 90 passed in [\d.]+s", failing)
    for n in range(3, 120, 4):  # every failing test, named in full
        name = f"tests/test_calc.py::test_double_of_a_number_is_that_number_added_to_itself_for_every_small_integer[{n}]"
        assert f"FAILED {name}" in failing, n
