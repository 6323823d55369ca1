"""The local backend keeps the workload's compiler caches in rollcall's cache directory between runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollcall.backends import local
from rollcall.backends.local import COMPILE_CACHE_ENV, LocalBackend, compile_cache_dir
from rollcall.collect import Collector
from rollcall.jobspec import JobSpec
from rollcall_workload.rank import compile_cache


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"ROLLCALL_CACHE_DIR": "/c/rc", "XDG_CACHE_HOME": "/c/xdg"}, "/c/rc/compile"),
        ({"XDG_CACHE_HOME": "/c/xdg"}, "/c/xdg/rollcall/compile"),
        ({}, "~/.cache/rollcall/compile"),  # the test's own HOME, read when it runs
    ],
)
def test_cache_directory(environ, expected):
    assert compile_cache_dir(environ) == Path(expected).expanduser()


def test_the_variable_is_the_one_train_py_reads():
    assert COMPILE_CACHE_ENV == compile_cache.COMPILE_CACHE_ENV


def _launched_env(monkeypatch, tmp_path, env):
    seen = []
    monkeypatch.setattr(local.LocalJob, "start", lambda self, index, cmd, e, sink: seen.append(e))
    spec = JobSpec(name="cache", nodes=1, procs_per_node=1, accelerator="cpu", env=env)
    LocalBackend().launch(spec, Collector(tmp_path))
    assert len(seen) == 1
    return seen[0]


def test_every_node_gets_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("ROLLCALL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    env = _launched_env(monkeypatch, tmp_path, {})
    assert env[COMPILE_CACHE_ENV] == str(tmp_path / "cache" / "compile")


def test_the_users_own_setting_wins(monkeypatch, tmp_path):
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    env = _launched_env(monkeypatch, tmp_path, {COMPILE_CACHE_ENV: "/elsewhere"})
    assert env[COMPILE_CACHE_ENV] == "/elsewhere"
