"""Run pipeline code in a fresh interpreter that kills itself at a failpoint (crash tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cdc_assets.pipeline.shared.failpoint import FAILPOINT_ENV
from cdc_assets.settings import Settings
from cdc_assets.spec.models import TableSpec
from cdc_assets_tests.conftest import PROJECT_ROOT

# The child's preamble: the spec from the file named on the command line, resources and a
# one-core Spark session from the environment's CDC home.
PREAMBLE = """
import sys
from cdc_assets.resources import build_resources
from cdc_assets.settings import load_settings
from cdc_assets.spec.models import TableSpec

spec = TableSpec.model_validate_json(open(sys.argv[1]).read())
res = build_resources(load_settings())
spark = res["spark"].model_copy(update={"master": "local[1]"}).get_session()
"""


def run_until_failpoint(
    settings: Settings, spec: TableSpec, body: str, failpoint: str, tmp: Path
) -> int:
    """Run ``body`` (after PREAMBLE) in a child; assert it died before printing 'finished'."""
    spec_file = tmp / f"{spec.name}-{failpoint}.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    env = {**os.environ, "CDC_ASSETS_HOME": str(settings.home), FAILPOINT_ENV: failpoint}
    proc = subprocess.run(
        [sys.executable, "-c", PREAMBLE + body + '\nprint("finished")\n', str(spec_file)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0, f"{failpoint}: the child was meant to die"
    assert "finished" not in proc.stdout, proc.stdout + proc.stderr
    return proc.returncode
