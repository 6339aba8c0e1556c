"""Which spec a process runs with: its file, or a newer version an evolution stored."""

from pathlib import Path

import pytest

from cdc_assets.spec import load_specs
from cdc_assets.spec.versions import newest
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.unit


def test_the_newer_version_wins_and_the_file_wins_a_tie() -> None:
    users = next(s for s in load_specs(Path(PROJECT_ROOT / "table_specs")) if s.name == "users")
    v2 = users.model_copy(update={"spec_version": users.spec_version + 1})
    assert newest(users, None) is users
    assert newest(users, v2) is v2
    assert newest(v2, users) is v2  # a person's edit ahead of the store
    edited = users.model_copy(update={"description": "edited by hand"})
    assert newest(edited, users) is edited  # same version: the reviewed file
