"""The user's package stores (``setup.stores``, ``judge/stores``): setup and
gates read them at their usual path, may write there as their tools must,
and nothing they write ever reaches the user's folder nor the next command."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import GP, make_repo
from gitflow_parallel import config as C
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.judge import check, stores
from hostile import needs_namespace
from test_judged_right import commit_in, packs, start, verdicts


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    (store / "pkg").mkdir(parents=True)
    (store / "pkg" / "index.txt").write_text("v1\n")
    (store / "gone.txt").write_text("keep me\n")
    return store


def _listing(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): (p.read_text() if p.is_file() and not p.is_symlink() else "")
            for p in sorted(folder.rglob("*"))}


def _project(tmp_path: Path, store: Path) -> Path:
    # The build reads its package from the store and writes there, as pnpm
    # (which registers each project in its store) and npm (index entries) do.
    build = (f'set -e; mkdir -p deps; cp "{store}/pkg/index.txt" deps/; echo registered > "{store}/projects.txt"; '
             f'rm "{store}/gone.txt"\n')
    config = textwrap.dedent(f"""
        setup:
          run: [sh, build.sh]
          cache_key: [build.sh]
          keep: [deps]
          stores: ['{store}']
        gates:
          - name: tests
            run: [sh, -c, 'sh code.sh; grep -qx v1 deps/index.txt']
          - name: store  # what setup and the gate before it wrote there is gone
            run: [sh, -c, 'grep -qx v1 "{store}/pkg/index.txt" && test -e "{store}/gone.txt" && ! test -e "{store}/evil"']
    """)
    return make_repo(tmp_path / "repo", {"build.sh": build, "code.sh": "echo ok\n"}, config=config)


# What judged code tries on the store: rewrite a package, plant one, link out of it.
PLANT = 'echo evil > "{s}/pkg/index.txt"; mkdir -p "{s}/evil"; echo x > "{s}/evil/index.txt"; ln -s / "{s}/root"\n'


@needs_namespace
def test_gates_read_the_store_and_never_write_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    before = _listing(store)
    project, worktrees = start(_project(tmp_path, store), 2)
    commit_in(worktrees["1"], {"code.sh": "echo tidy\n"})
    commit_in(worktrees["2"], {"code.sh": PLANT.format(s=store)})
    assert verdicts(check.check(project, "t", instances=["1"], jobs=1)) == {"1": "pass"}
    assert verdicts(check.check(project, "t", instances=["2"], jobs=1)) == {"2": "pass"}  # its writes went nowhere
    assert _listing(store) == before
    by_id = packs(project)
    assert by_id["1"]["setup"]["stores"] == [str(store)] and by_id["1"]["setup"]["built_from"] == "base"
    assert by_id["2"]["setup"]["cached"] is True  # the environment built from the base, reused
    # The planter checked again: still nothing in the store, from the kept environment.
    assert verdicts(check.check(project, "t", instances=["2"], jobs=1)) == {"2": "pass"}
    assert packs(project)["2"]["setup"]["cached"] is True and _listing(store) == before


@needs_namespace
def test_an_attempts_own_build_never_writes_the_store(tmp_path: Path) -> None:
    store = _store(tmp_path)
    before = _listing(store)
    project, worktrees = start(_project(tmp_path, store), 1)
    build = (worktrees["1"] / "build.sh").read_text()
    commit_in(worktrees["1"], {"build.sh": build + PLANT.format(s=store)})  # its install scripts plant
    assert verdicts(check.check(project, "t", jobs=1)) == {"1": "pass"}
    assert packs(project)["1"]["setup"]["built_from"] == "attempt"
    assert _listing(store) == before


@needs_namespace
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_a_store_holding_the_repository_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"code.sh": "echo ok\n"}, config=textwrap.dedent(f"""
        setup: {{run: [sh, -c, 'true'], stores: ['{tmp_path}']}}
        gates:
          - name: tests
            run: [sh, code.sh]
    """))
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo 'echo tidy' >> code.sh")
    out = gp("check", "t", code=1).stderr
    assert "PARALLEL_CONFIG_INVALID" in out and "setup.stores" in out and "holds" in out


def test_each_name_is_where_its_tool_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("PNPM_HOME", "npm_config_store_dir", "NPM_CONFIG_STORE_DIR", "npm_config_cache", "NPM_CONFIG_CACHE",
                 "XDG_DATA_HOME", "XDG_CACHE_HOME", "PIP_CACHE_DIR", "UV_CACHE_DIR", "YARN_CACHE_FOLDER", "GOPATH",
                 "GOMODCACHE", "GOCACHE", "CARGO_HOME"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path.resolve()
    assert stores.folders("pnpm") == [home / ".local/share/pnpm/store"]
    assert stores.folders("npm") == [home / ".npm"]
    assert stores.folders("pip") == [home / ".cache/pip"]
    assert stores.folders("go") == [home / "go/pkg/mod", home / ".cache/go-build"]
    assert stores.folders("cargo") == [home / ".cargo/registry", home / ".cargo/git"]
    assert stores.folders("~/mine") == [home / "mine"]
    monkeypatch.setenv("PNPM_HOME", str(tmp_path / "p"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pc"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    assert stores.folders("pnpm") == [home / "p/store"]
    assert stores.folders("pip") == [home / "pc"] and stores.folders("uv") == [home / "xc/uv"]
    # Only existing folders are read, outer ones first; one holding a guarded place is refused.
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert stores.resolve([str(tmp_path / "a/b"), str(tmp_path / "a"), "~/none"], []) == [home / "a", home / "a/b"]
    with pytest.raises(ParallelError, match="holds the repo"):
        stores.resolve([str(tmp_path)], [("the repo", tmp_path / "r" / ".git")])
    with pytest.raises(ParallelError, match="is in the repo"):
        stores.resolve([str(tmp_path / "r/.git/x")], [("the repo", tmp_path / "r" / ".git")])


def test_the_config_takes_names_and_folders_only() -> None:
    assert C.parse("setup: {run: [x], stores: [pnpm, ~/s, /opt/s]}")["setup"]["stores"] == ["pnpm", "~/s", "/opt/s"]
    assert "stores" not in C.parse("setup: {run: [x]}")["setup"]  # runs frozen before the key still match
    for bad in ("[pnmp]", "[relative/path]", "pnpm", "[1]", '[""]'):
        with pytest.raises(ParallelError, match="setup.stores"):
            C.parse(f"setup: {{run: [x], stores: {bad}}}")


@pytest.mark.parametrize("files,store,word", [
    ({"package.json": '{"scripts": {"test": "jest"}}', "pnpm-lock.yaml": "lockfileVersion: '9.0'\n",
      "pnpm-workspace.yaml": "onlyBuiltDependencies: []\n"}, "pnpm", "--prefer-offline"),
    ({"package.json": '{"scripts": {"test": "jest"}}', "package-lock.json": "{}"}, "npm", "--prefer-offline"),
    ({"go.mod": "module x\n", "x_test.go": "package x\n"}, "go", "download"),
    ({"Cargo.toml": "[package]\nname = 'x'\n"}, "cargo", "fetch"),
    ({"pyproject.toml": "[project]\nname = 'x'\n", "tests/test_x.py": "def test_x(): pass\n"}, "pip", "pip"),
])
def test_init_writes_a_setup_that_reads_the_users_store(tmp_path: Path, files: dict[str, str], store: str,
                                                        word: str) -> None:
    repo = make_repo(tmp_path / "repo", files)
    GP(repo)("init")
    setup = C.parse((repo / ".gitparallel.yaml").read_bytes())["setup"]
    assert setup["stores"] == [store] and word in " ".join(setup["run"])
    if store == "pnpm":  # what changes the install is part of its key
        assert setup["cache_key"] == ["package.json", "pnpm-lock.yaml", "pnpm-workspace.yaml"]


@pytest.mark.slow  # compiles with the Go toolchain (no network: the module has no dependency)
@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
@needs_namespace
@pytest.mark.parametrize("read", [True, False])
def test_go_test_needs_its_build_cache_and_never_writes_the_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 read: bool) -> None:
    cache = tmp_path / "go-build"
    cache.mkdir()
    (cache / "README").write_text("the user's\n")
    monkeypatch.setenv("GOCACHE", str(cache))
    monkeypatch.setenv("GOPATH", str(tmp_path / "gopath"))
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    stores_line = "  stores: [go]\n" if read else ""
    config = f"setup:\n  run: [go, mod, download]\n  cache_key: [go.mod]\n{stores_line}" \
             "gates:\n  - name: tests\n    run: [go, test, ./...]\n"
    repo = make_repo(tmp_path / "repo", {"go.mod": "module calc\n\ngo 1.13\n", "calc.go": GO_CALC,
                                         "calc_test.go": GO_TEST}, config=config)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc.go": GO_CALC + "\n// tidy\n"})
    # Go writes its build cache even to read it: read-only, no Go gate can pass.
    assert verdicts(check.check(project, "t", jobs=1)) == {"1": "pass" if read else "fail"}
    said = Path(packs(project)["1"]["gates"][0]["log"]).read_text()
    assert ("read-only file system" in said) is not read, said
    assert _listing(cache) == {"README": "the user's\n"}


GO_CALC = "package calc\n\nfunc Add(a, b int) int { return a + b }\n"
GO_TEST = 'package calc\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal("add")\n\t}\n}\n'


def test_init_check_names_a_tool_whose_store_setup_does_not_read(tmp_path: Path) -> None:
    config = ("setup:\n  run: [sh, -c, 'corepack enable && pnpm install --frozen-lockfile']\n"
              "  cache_key: [pnpm-lock.yaml]\n  keep: [node_modules]\n"
              "gates:\n  - name: tests\n    run: [go, test, ./...]\n")
    repo = make_repo(tmp_path / "repo", {"pnpm-lock.yaml": ""}, config=config)
    warnings = GP(repo).json("init", "--check")["warnings"]
    assert [w.split(" without")[0] for w in warnings if "store" in w] == ["setup and gates run pnpm",
                                                                          "setup and gates run go"]
    (repo / ".gitparallel.yaml").write_text(config.replace("  keep:", "  stores: [pnpm, go]\n  keep:"))
    assert not [w for w in GP(repo).json("init", "--check")["warnings"] if "store" in w]


@needs_namespace
def test_a_store_holding_a_gates_hidden_tests_is_refused(tmp_path: Path) -> None:
    # bwrap reads an overlay's lower folder as the host has it: the hidden tests would be seen again.
    (tmp_path / "secret" / "hidden").mkdir(parents=True)
    repo = make_repo(tmp_path / "repo", {"code.sh": "echo ok\n"}, config=textwrap.dedent(f"""
        setup: {{run: [sh, -c, 'true'], stores: ['{tmp_path / "secret"}']}}
        gates:
          - name: tests
            run: [sh, code.sh]
            hidden: '{tmp_path / "secret" / "hidden"}'
    """))
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"code.sh": "echo tidy\n"})
    errors = check.check(project, "t", jobs=1)["errors"]
    assert errors[0]["code"] == "PARALLEL_CONFIG_INVALID" and "holds a gate's hidden tests" in errors[0]["message"]
