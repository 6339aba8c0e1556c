"""A fleet of real source tables for ``source_freshness.py --fleet N`` (issue 58).

N - 1 copies of an example MariaDB table in a database of their own (``fleet``), captured by a
Debezium connector of their own (topics ``fleet.fleet.t0001`` ..., created beforehand with one
partition each; schema changes on ``fleet``), and a spec per table made from the example table's
spec. The copies start empty, as the generated-events fleet (``fleet_freshness.py``) does: the
fleet is in its steady state when the measurement starts. (Seeded with two rows each, the
first ``sync_tables`` run carried all 1,000 tables' snapshots and was still going after eight
minutes: a first load, not freshness.) While the hot table takes the measured workload, a
``Trickle`` thread changes the fleet's tables through the MariaDB client as a Poisson stream:
each table one change every ``interval`` minutes on average, at a table picked at random.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATABASE = "fleet"
PREFIX = "fleet"  # the connector's topic.prefix: topics fleet.fleet.<table>, schema changes fleet
SERVER_ID = 5490  # the connector's replication id, distinct from the stack's own connectors


def table_names(n: int) -> list[str]:
    """The fleet's source tables besides the hot one: ``t0001`` ... ``t<n - 1>``."""
    return [f"t{i:04d}" for i in range(1, n)]


def _insert(table: str, key: int, now_ms: int) -> str:
    return (
        f"INSERT INTO `{DATABASE}`.`{table}` (id, email, display_name, country, is_active, "
        f"login_count, created_ms, updated_at) VALUES ({key}, 'u{key}@{table}.example.org', "
        f"'Fleet {table} {key}', 'NL', 1, 0, {now_ms}, NOW(3));"
    )


def create_tables(settings: Any, bootstrap: str, template: tuple[str, str], n: int) -> list[str]:
    """``n - 1`` empty copies of the source table ``template`` (database, table) in ``fleet``,
    and their topics (one partition: an event's offset orders it); their names."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    from cdc_assets_dev.stack import sources

    names = table_names(n)
    statements = [f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`;"]
    like = f"`{template[0]}`.`{template[1]}`"
    statements += [
        f"CREATE TABLE IF NOT EXISTS `{DATABASE}`.`{name}` LIKE {like};" for name in names
    ]
    sources.mariadb_execute(settings, "\n".join(statements))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(topic(name), num_partitions=1, replication_factor=1) for name in names]
    for i in range(0, len(topics), 200):
        for future in admin.create_topics(topics[i : i + 200]).values():
            future.result(60)
    return names


def topic(name: str) -> str:
    """The topic of fleet table ``name``: the connector's prefix, database and table."""
    return f"{PREFIX}.{DATABASE}.{name}"


def capture(settings: Any, bootstrap: str, names: list[str]) -> None:
    """A Debezium connector of its own over the fleet's tables; returns once its snapshot is
    done."""
    from cdc_assets_dev.stack import connect

    config = connect.capture_config(
        settings,
        bootstrap,
        "mariadb",
        prefix=PREFIX,
        tables=[f"{DATABASE}.{name}" for name in names],
        server_id=SERVER_ID,
        schema_changes=True,
    )
    # Debezium reads every table's schema and rows before its first heartbeat.
    connect.register_capture(settings, bootstrap, "cdc-fleet", config, snapshot_timeout=1800.0)


def write_specs(specs_dir: Path, template: str, names: list[str]) -> None:
    """A spec per fleet table, made from the spec ``template`` (a file in ``specs_dir``): the
    same columns, its own source table, topic and sink table, one bucket, no sensitive columns
    (a fleet of small tables as most deployments have them)."""
    import yaml

    data = yaml.safe_load((specs_dir / f"{template}.yaml").read_text(encoding="utf-8"))
    data.pop("pipeline", None)
    data["columns"] = [{k: v for k, v in c.items() if k != "sensitive"} for c in data["columns"]]
    data["base"] = {**(data.get("base") or {}), "buckets": 1}
    for name in names:
        spec = dict(data)
        spec["name"] = f"{DATABASE}_{name}"
        spec["description"] = f"Fleet copy {name} of {template}."
        spec["source"] = {
            **data["source"],
            "database": DATABASE,
            "table": name,
            "topic": topic(name),
            "schema_change_topic": PREFIX,
        }
        spec["sink"] = {**(data.get("sink") or {}), "namespace": DATABASE}
        path = specs_dir / f"{spec['name']}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")


@dataclass
class Trickle:
    """A thread changing the fleet's tables, ``rate`` statements a second over all of them
    (Poisson), at tables picked at random: an insert of a new key, or an update of one the table
    holds. ``touched`` names the tables it changed."""

    settings: Any
    names: list[str]
    rate: float
    seed: int = 58
    touched: set[str] = field(default_factory=set)
    statements: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _keys: dict[str, int] = field(default_factory=dict)

    def _statement(self, rng: random.Random) -> tuple[str, str]:
        name = rng.choice(self.names)
        highest = self._keys.get(name, 0)
        if highest == 0 or rng.random() < 0.5:
            self._keys[name] = highest + 1
            return name, _insert(name, highest + 1, int(time.time() * 1000))
        key = rng.randint(1, highest)
        return name, (
            f"UPDATE `{DATABASE}`.`{name}` SET login_count = login_count + 1, "
            f"updated_at = NOW(3) WHERE id = {key};"
        )

    def start(self) -> None:
        from cdc_assets_dev.stack import sources

        rng = random.Random(self.seed)

        def run() -> None:
            while not self._stop.wait(rng.expovariate(self.rate)):
                name, sql = self._statement(rng)
                sources.mariadb_execute(self.settings, sql)
                self.touched.add(name)
                self.statements += 1

        self._thread = threading.Thread(target=run, name="trickle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
