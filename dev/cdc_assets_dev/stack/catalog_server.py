"""The cluster profile's shared Iceberg catalog: Iceberg's JDBC catalog in a database of the
PostgreSQL server the local stack already runs for its sources, so that every engine and process
(the Spark Connect driver, Dagster runs and sensors through pyiceberg, other hosts) commits through
one server with row locks instead of one SQLite file. What was tried for a REST catalog and why
this was chosen is in docs/cluster.md.

The database, its owner and the owner's password are made once and recorded in the state file's
``catalog_server`` section; ``catalog_config`` renders them for both engines.
"""

from __future__ import annotations

import secrets
from typing import Any

from cdc_assets.local_servers import state as stack_state
from cdc_assets.local_servers.endpoints import CATALOG_SERVER_SECTION as SECTION
from cdc_assets.local_servers.endpoints import CatalogServer, recorded_catalog_server
from cdc_assets.settings import Settings
from cdc_assets_dev.stack import sources
from cdc_assets_dev.stack.kafka_broker import HOST

DATABASE = "iceberg_catalog"
USER = "iceberg"


def recorded(settings: Settings) -> CatalogServer | None:
    """The catalog server the state file names (running or not)."""
    return recorded_catalog_server(settings)


def running(settings: Settings) -> CatalogServer | None:
    """The recorded catalog server when the stack's PostgreSQL runs, else None."""
    server = recorded(settings)
    if server is None:
        return None
    up = any(
        s.name == "postgres" and s.state == "running" for s in sources.sources_status(settings)
    )
    return server if up else None


def start(settings: Settings) -> CatalogServer:
    """Start (or keep) the stack's PostgreSQL and make sure the catalog database exists."""
    (settings.stack_dir / "logs").mkdir(parents=True, exist_ok=True)
    port = sources.start_postgres(settings)
    entry: dict[str, Any] = stack_state.section(settings, SECTION)
    password = str(entry.get("password") or secrets.token_hex(16))
    if not entry:
        # Idempotent: a stack whose state was reset keeps its PostgreSQL data directory.
        sources.postgres_execute(
            settings,
            f"""DO $$ BEGIN
                  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{USER}') THEN
                    CREATE ROLE {USER} LOGIN PASSWORD '{password}';
                  ELSE
                    ALTER ROLE {USER} LOGIN PASSWORD '{password}';
                  END IF;
                END $$;""",
        )
        exists = sources.postgres_execute(
            settings, f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';"
        )
        if "1" not in exists.split():
            sources.postgres_execute(settings, f'CREATE DATABASE "{DATABASE}" OWNER {USER};')
    server = CatalogServer(f"jdbc:postgresql://{HOST}:{port}/{DATABASE}", USER, password)
    stack_state.put(
        settings,
        **{SECTION: {"jdbc_url": server.jdbc_url, "user": USER, "password": password}},
    )
    return server
