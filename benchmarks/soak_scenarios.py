"""Soak: many seeded schema-change scenarios through a real dagster-daemon (issue 53).

Runs ``cdc_assets_tests/integration/test_daemon_scenarios.py`` for a range of seeds (one pytest
session: one broker, one Spark driver), then prints one line per seed (scenario, outcome,
seconds), writes ``benchmarks/results/soak_scenarios.json`` and a plot of the seconds per seed.
A failed seed is reproduced with ``CDC_ASSETS_SCENARIO_SEEDS=<seed> make test-integration``
(or pytest on that file) and then gets a named regression test.

    .venv/bin/python benchmarks/soak_scenarios.py --seeds 100-129
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_common import ROOT, results_plot, save_results
from cdc_assets_tests.support.scenarios import SEEDS_ENV, scenario

TEST = "cdc_assets_tests/integration/test_daemon_scenarios.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="100-109", help="e.g. 100-129 or 5,8,13")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pytest",
            TEST,
            "-q",
            "-p",
            "no:cacheprovider",
            "--junit-xml",
            str(Path(tmp) / "junit.xml"),
        ]
        env = {**os.environ, SEEDS_ENV: args.seeds}
        print(f"running seeds {args.seeds} ({' '.join(command[3:4])}) ...", flush=True)
        subprocess.run(command, cwd=ROOT, env=env, check=False)
        outcomes = _outcomes(Path(tmp) / "junit.xml")
        report.write_text(json.dumps(outcomes), encoding="utf-8")
    print(f"\n{'seed':>6}  {'outcome':8} {'seconds':>8}  scenario")
    for seed, (outcome, seconds) in sorted(outcomes.items()):
        print(f"{seed:>6}  {outcome:8} {seconds:8.1f}  {scenario(seed)}")
    failed = sorted(s for s, (o, _) in outcomes.items() if o != "passed")
    print(f"\n{len(outcomes) - len(failed)} of {len(outcomes)} seeds converged", end="")
    print(f"; failed: {failed}" if failed else "")
    save_results(
        "soak_scenarios",
        {
            "seeds": args.seeds,
            "results": [
                {"seed": s, "scenario": str(scenario(s)), "outcome": o, "seconds": t}
                for s, (o, t) in sorted(outcomes.items())
            ],
            "failed": failed,
        },
    )
    with results_plot("soak_scenarios") as ax:
        seeds = sorted(outcomes)
        colors = ["tab:green" if outcomes[s][0] == "passed" else "tab:red" for s in seeds]
        ax.bar([str(s) for s in seeds], [outcomes[s][1] for s in seeds], color=colors)
        ax.set_xlabel("seed")
        ax.set_ylabel("seconds to converge (red: failed)")
        ax.set_title("seeded schema-change scenarios through the daemon")
        ax.tick_params(axis="x", labelrotation=90)
    return 1 if failed else 0


def _outcomes(junit: Path) -> dict[int, tuple[str, float]]:
    """seed -> (passed/failed/error, seconds) from pytest's JUnit XML."""
    import xml.etree.ElementTree as ET

    out: dict[int, tuple[str, float]] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        if "[" not in name:
            continue
        seed = int(name.rsplit("[", 1)[1].rstrip("]"))
        failed = case.find("failure") is not None or case.find("error") is not None
        out[seed] = ("failed" if failed else "passed", float(case.get("time", 0)))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
