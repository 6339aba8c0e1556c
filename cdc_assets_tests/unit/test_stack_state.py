"""The local stack's one state file: sections kept apart, concurrent writers, older layouts."""

import json
import multiprocessing
import stat
from pathlib import Path

import pytest

from cdc_assets.errors import StackError
from cdc_assets.local_servers import state
from cdc_assets.settings import Settings, load_settings

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path) -> Settings:
    return load_settings({"CDC_ASSETS_HOME": str(tmp_path)})


def _writer(home: str, n: int) -> None:
    settings = load_settings({"CDC_ASSETS_HOME": home})
    for i in range(50):
        state.update(settings, f"s{n}", **{f"k{i}": i})


def test_sections_and_top_level_entries_stay_apart(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert state.read(settings) == {}
    state.put(settings, kafka={"pid": 1}, warehouse="w")
    state.update(settings, "sources", password="x", ports={"mariadb": 3})
    state.update(settings, "sources", password=None)
    assert state.section(settings, "sources") == {"ports": {"mariadb": 3}}
    assert state.read(settings)["kafka"] == {"pid": 1}
    state.put(settings, kafka=None)
    assert not state.has_section(settings, "kafka")
    assert state.has_section(settings, "sources")
    mode = stat.S_IMODE(state.state_path(settings).stat().st_mode)
    assert mode == 0o600  # it holds a password


def test_concurrent_writers_keep_every_entry(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_writer, args=(str(tmp_path), n)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    data = state.read(settings)
    for n in range(3):
        assert data[f"s{n}"] == {f"k{i}": i for i in range(50)}


def test_files_of_an_older_release_are_folded_in(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    stack = settings.stack_dir
    (stack / "spark-connect").mkdir(parents=True)
    (stack / "state.json").write_text(json.dumps({"kafka": {"pid": 7}}))
    (stack / "sources.json").write_text(json.dumps({"password": "p"}))
    (stack / "spark-connect" / "server.json").write_text(json.dumps({"pid": 8, "port": 9}))
    (stack / "kafka.pid").write_text("7\n")
    assert state.read(settings) == {
        "kafka": {"pid": 7},
        "sources": {"password": "p"},
        "spark_connect": {"pid": 8, "port": 9},
    }
    assert sorted(p.name for p in stack.iterdir() if p.is_file()) == [".state.lock", "state.json"]


def test_a_damaged_file_names_the_reset(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    settings.stack_dir.mkdir(parents=True)
    state.state_path(settings).write_text("{not json")
    with pytest.raises(StackError, match="stack down"):
        state.read(settings)


def test_a_reader_creates_nothing_in_the_stack_dir(tmp_path: Path) -> None:
    # A reader that created the lock file raced `stack down --purge` removing the directory
    # ("Directory not empty" at a test session's teardown).
    settings = _settings(tmp_path)
    state.put(settings, kafka={"pid": 1})
    (settings.stack_dir / state.LOCK_FILE).unlink()
    before = sorted(p.name for p in settings.stack_dir.iterdir())
    assert state.read(settings) == {"kafka": {"pid": 1}}
    assert state.section(settings, "sources") == {}
    assert sorted(p.name for p in settings.stack_dir.iterdir()) == before
    state.state_path(settings).unlink()
    assert state.read(settings) == {}
