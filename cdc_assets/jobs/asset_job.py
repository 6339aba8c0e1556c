"""The type of the shared asset jobs (what ``dg.define_asset_job`` returns).

Dagster resolves such a job against the asset graph when the Definitions load and exports no
public name for its type; naming it here keeps the modules off Dagster's private packages.
"""

from typing import Any, TypeAlias

AssetJob: TypeAlias = Any
