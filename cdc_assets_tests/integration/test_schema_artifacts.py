"""Schema packages (issue 23, part 1): built with `build`, published into a PEP 503
file index, installed by pip with `==` and `>=` pins, imported and used to validate rows: the
pydantic record, the pandera frame (nullability, enum values), the Avro and JSON schemas. A
published version never changes; a view's version moves only when its schema does.

No server is needed, but it builds wheels and runs pip: integration tier.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_assets.pipeline.evolution.artifacts import (
    publish,
    publish_table,
    publish_tables,
    publish_view,
)
from cdc_assets.schema.artifacts import ArtifactError, render_artifact
from cdc_assets.schema.views import RelationSchema, SchemaColumn, table_schema
from cdc_assets.spec import load_specs
from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration

USE = r"""
import datetime, json, sys
import pandas as pd
import pydantic
import cdc_schema_app_users as users
import cdc_schema_app_active_users as view

out = {"users": users.VERSION, "view": view.VERSION}
row = users.Record(id=1, email="a@x", is_active=True, login_count=0,
                   created_at=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), tier="gold")
out["record"] = row.model_dump()["tier"]
try:
    users.Record(id=None, email="a@x", is_active=True, login_count=0,
                 created_at=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    out["null_key"] = "accepted"
except pydantic.ValidationError:
    out["null_key"] = "rejected"
frame = pd.DataFrame({"user_id": [1, 2], "state": ["active", "banned"]})
out["frame_ok"] = len(view.RecordFrame.validate(frame))
try:
    view.RecordFrame.validate(pd.DataFrame({"user_id": [3], "state": ["deleted"]}))
    out["enum"] = "accepted"
except Exception:
    out["enum"] = "rejected"
out["avro_enum"] = view.avro_schema()["fields"][1]["type"]["symbols"]
out["json_required"] = users.json_schema()["required"]
print(json.dumps(out))
"""


def fresh_venv(path: Path) -> Path:
    """A new virtualenv whose only link to this one is a .pth file for the packages' own
    dependencies (pydantic, pandera, pandas: no download in tests); returns its python."""
    import site
    import venv

    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = "\n".join(site.getsitepackages())
    (Path(purelib) / "_cdc_test_deps.pth").write_text(deps + "\n", encoding="utf-8")
    return python


def install(index: Path, python: Path, *requirements: str) -> None:
    """pip (this environment's) installs into the fresh virtualenv from the file index."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--index-url",
            (index / "simple").as_uri(),
            *requirements,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_packages_publish_install_and_validate(tmp_path: Path) -> None:
    index = tmp_path / "artifacts"
    users = next(s for s in load_specs(PROJECT_ROOT / "table_specs") if s.name == "users")
    first = publish_table(users, index)
    assert (first.version, first.created) == ("1.0.0", True)
    assert publish_table(users, index).created is False  # the same version again: a no-op

    # A second spec version with a column: version 2.0.0 beside 1.0.0.
    v2 = users.model_copy(
        update={
            "spec_version": 2,
            "columns": [
                *users.columns,
                users.columns[2].model_copy(update={"id": 50, "name": "tier", "comment": None}),
            ],
        }
    )
    assert publish_table(v2, index).version == "2.0.0"
    # The same version with another schema is refused; what was published stays.
    wheel = next((index / "simple" / "cdc-schema-app-users").glob("*2.0.0*.whl"))
    before = wheel.read_bytes()
    changed = table_schema(v2.model_copy(update={"columns": v2.columns[:-1]}))
    with pytest.raises(ArtifactError, match="already published with another schema"):
        publish(render_artifact(changed, "2.0.0"), index)
    assert wheel.read_bytes() == before

    view = RelationSchema(
        "app.active_users",
        (
            SchemaColumn("user_id", "bigint", nullable=False, display="UserId"),
            SchemaColumn("state", "string", nullable=False, enum=("active", "banned")),
        ),
        kind="view",
        reads=("app.users",),
    )
    assert publish_view(view, index).version == "1.0.0"
    assert publish_view(view, index).created is False
    wider = RelationSchema(
        view.name, (*view.columns, SchemaColumn("tier", "string")), "view", view.reads
    )
    assert publish_view(wider, index).version == "2.0.0"
    assert publish_view(view, index).version == "1.0.0"  # an earlier schema keeps its version

    python = fresh_venv(tmp_path / "venv")
    install(index, python, "cdc-schema-app-users>=2", "cdc-schema-app-active-users==1.0.0")
    done = subprocess.run([str(python), "-c", USE], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "users": "2.0.0",
        "view": "1.0.0",
        "record": "gold",
        "null_key": "rejected",
        "frame_ok": 2,
        "enum": "rejected",
        "avro_enum": ["active", "banned"],
        "json_required": [
            "id",
            "email",
            "is_active",
            "login_count",
            "created_at",
        ],
    }


def test_packages_published_at_once_keep_every_index_page(tmp_path: Path) -> None:
    """``publish_tables`` builds several packages at once (threads), each publish rewriting the
    root page and its own: the root page still names every package, each page its wheels."""
    import re

    index = tmp_path / "artifacts"
    specs = load_specs(PROJECT_ROOT / "table_specs")
    many = [
        s.model_copy(
            update={
                "name": f"{s.name}_{i}",
                "sink": s.sink.model_copy(update={"table": f"{s.sink.table or s.name}_{i}"}),
            }
        )
        for i in range(2)
        for s in specs
    ]
    published = publish_tables(many, index)
    assert [p.created for p in published] == [True] * len(many)
    root = (index / "simple" / "index.html").read_text()
    listed = set(re.findall(r'href="([^"/]+)/"', root))
    assert listed == {p.wheel.parent.name for p in published}
    for p in published:
        page = (p.wheel.parent / "index.html").read_text()
        assert f'href="{p.wheel.name}"' in page
    assert not list(index.rglob("*.tmp"))  # every page was replaced whole
    # Publishing them again is a no-op for each.
    assert [p.created for p in publish_tables(many, index)] == [False] * len(many)
