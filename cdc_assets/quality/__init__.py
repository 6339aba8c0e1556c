"""Pure judgements of a mirror (no Dagster, Spark or pyiceberg): the verdicts of the asset checks
from measured figures (`rules`), the row-by-row difference between a source and base
(`mirror_diff`), and the fleet's per-table metrics (`fleet`). The checks (Dagster) and the
pipeline (Spark, pyiceberg) measure; these decide."""
