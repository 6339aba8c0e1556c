"""The JVM dependencies of the product: jars Maven fetches into the jar cache (``maven``) and
the project's own jars compiled from ``cdc_assets/jvm`` (``own``). The local stack uses them
too; they import nothing of it."""
