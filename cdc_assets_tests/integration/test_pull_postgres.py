"""Pull detection end to end on PostgreSQL (issue 26): a table onboarded from its
information_schema, mirrored through a Debezium connector of its own; a real ``ALTER TABLE ...
ADD COLUMN`` on the live source is seen by ``check_schema_drift`` through the
information_schema, the ``schema_drift_detected`` sensor starts the evolution, and base converges
to the source, new column included. The MariaDB side runs in ``test_two_servers``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from confluent_kafka import Consumer, TopicPartition

from cdc_assets.definitions import build_defs
from cdc_assets.pipeline.ingest import ingest_incremental
from cdc_assets.pipeline.source_compare import compare_source
from cdc_assets.pipeline.source_schema import import_source_spec
from cdc_assets.pipeline.tables import ensure_tables
from cdc_assets.pipeline.upsert import build_bucketed, merge_base
from cdc_assets.resources import IcebergCatalogResource, KafkaResource
from cdc_assets.settings import Settings, source_url_variable
from cdc_assets.spec.information_schema import SourceTable
from cdc_assets.spec.load import load_spec
from cdc_assets.spec.models import TableSpec
from cdc_assets.spec.versions import write_spec
from cdc_assets.stack import sources
from cdc_assets.stack.local_stack import StackState
from cdc_assets_tests.integration.test_two_servers import drift_detected
from cdc_assets_tests.support import extra_connector

pytestmark = pytest.mark.integration

DELIVERY_TIMEOUT_S = 120.0


@dataclass
class PgTable:
    home: Settings
    bootstrap: str
    table: str
    url: str
    specs_dir: Path
    kafka: KafkaResource
    connector: extra_connector.ExtraConnector
    markers: Iterator[int]

    def spec(self) -> TableSpec:
        return load_spec(self.specs_dir / f"{self.table}.yaml")

    def execute(self, sql: str) -> None:
        sources.postgres_execute(self.home, sql, "shop")

    def defs(self, resources: dict[str, Any]) -> dg.Definitions:
        variable = source_url_variable("shop", self.spec().source.server_name)
        settings = replace(self.home, specs_dir=self.specs_dir, source_urls={variable: self.url})
        return build_defs(settings=settings, resource_overrides={**resources, "kafka": self.kafka})


@pytest.fixture(scope="module")
def pg(
    sources_home: Settings, sources_stack: StackState, spark: Any, tmp_path_factory: Any
) -> Iterator[PgTable]:
    tag = uuid.uuid4().hex[:6]
    table = f"pull_{tag}"
    sources.postgres_execute(
        sources_home,
        f"CREATE TABLE public.{table} (id bigint PRIMARY KEY, note text, amount numeric(10,2));"
        f"GRANT SELECT ON public.{table} TO {sources.CDC_USER};"
        f"CREATE PUBLICATION pub_{tag} FOR TABLE public.{table};"
        f"INSERT INTO public.{table} VALUES (1, 'one', 1.50), (2, 'two', 2.25);",
        "shop",
    )
    url = next(
        u for db, kind, u in sources.jdbc_urls(sources_home) if (db, kind) == ("shop", "postgres")
    )
    connector = extra_connector.register(
        sources_home,
        sources_stack.bootstrap_servers,
        "postgres",
        tag,
        [f"public.{table}"],
        overrides={"publication.name": f"pub_{tag}"},
    )
    specs_dir = tmp_path_factory.mktemp("pull-pg-specs")
    try:
        # Onboarding is evolution from an empty schema: version 1 from the information_schema.
        spec, _ = import_source_spec(
            spark,
            url,
            SourceTable("postgresql", "shop", table, "public"),
            topic_prefix=connector.prefix,
            namespace=f"pull_{tag}",
        )
        assert spec.source.server_name == connector.prefix
        write_spec(spec, specs_dir / f"{table}.yaml")
        ensure_tables(spark, "lake", spec)
        yield PgTable(
            sources_home,
            sources_stack.bootstrap_servers,
            table,
            url,
            specs_dir,
            KafkaResource(
                bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
            ),
            connector,
            iter(range(9_000_000, 2**62)),
        )
    finally:
        admin = KafkaResource(
            bootstrap_servers=sources_stack.bootstrap_servers, home=str(sources_home.home)
        ).admin()
        extra_connector.remove(sources_home, connector, admin)
        sources.postgres_execute(
            sources_home, f"DROP PUBLICATION pub_{tag}; DROP TABLE public.{table};", "shop"
        )


def wait_delivered(pg: PgTable) -> None:
    """Insert and delete a marker row; return when its delete is on the topic."""
    key = next(pg.markers)
    pg.execute(
        f"INSERT INTO public.{pg.table} (id, note) VALUES ({key}, 'marker');"
        f"DELETE FROM public.{pg.table} WHERE id = {key};"
    )
    topic = pg.spec().source.topic
    consumer = Consumer(
        {
            "bootstrap.servers": pg.bootstrap,
            "group.id": f"pull-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None or msg.value() is None:
                continue
            event = json.loads(msg.value())["payload"]
            if event.get("op") == "d" and (event.get("before") or {}).get("id") == key:
                return
    finally:
        consumer.close()
    raise AssertionError(f"marker {key} not delivered within {DELIVERY_TIMEOUT_S:.0f} s")


def converge(pg: PgTable, spark: Any, iceberg: IcebergCatalogResource) -> None:
    wait_delivered(pg)
    spec = pg.spec()
    result = ingest_incremental(spark, "lake", iceberg.load_catalog(), pg.kafka, spec)
    assert result.dead == 0, result.dead_reasons
    build_bucketed(spark, "lake", iceberg.load_catalog(), spec)
    merge_base(spark, "lake", iceberg.load_catalog(), spec)
    diff = compare_source(spark, "lake", spec, pg.url)
    assert diff.equal, diff.summary()


def test_a_column_added_on_the_live_source_arrives_through_pull_detection(
    pg: PgTable, spark: Any, iceberg: IcebergCatalogResource, resources: dict[str, Any]
) -> None:
    instance = dg.DagsterInstance.ephemeral()
    pg.execute(f"UPDATE public.{pg.table} SET amount = 3.75 WHERE id = 2;")
    converge(pg, spark, iceberg)
    assert drift_detected(pg.defs(resources), instance) == []

    pg.execute(f"ALTER TABLE public.{pg.table} ADD COLUMN coupon text;")
    pg.execute(
        f"UPDATE public.{pg.table} SET coupon = 'SPRING' WHERE id = 1;"
        f"INSERT INTO public.{pg.table} VALUES (3, 'three', 3.00, 'FALL');"
    )
    wait_delivered(pg)
    defs = pg.defs(resources)
    (request,) = drift_detected(defs, instance)
    assert request.tags["cdc/table"] == pg.table
    run = defs.resolve_job_def("evolve_schemas").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
    )
    assert run.success
    evolved = pg.spec()
    assert evolved.spec_version == 2
    assert [c.name for c in evolved.columns] == ["id", "note", "amount", "coupon"]
    converge(pg, spark, iceberg)  # base == source, the coupons included
    assert drift_detected(pg.defs(resources), instance) == []

    # maintain_when_clean: a clean drift check starts maintenance of the table, which runs
    defs = pg.defs(resources)
    (maintain,) = drift_detected(defs, instance, maintain_when_clean=True)
    assert maintain.job_name == "maintain_tables"
    assert maintain.tags["cdc/table"] == pg.table
    run = defs.resolve_job_def("maintain_tables").execute_in_process(
        instance=instance, run_config=maintain.run_config
    )
    assert run.success
    converge(pg, spark, iceberg)  # still equal after compaction and expiry
