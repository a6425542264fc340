"""The README documents the forecast as a contract: the series its table names are the
ones the rules record, and every series the alerts and the on-call tools read is in it.

A rename in ``exporter/promql/names.py`` that the README does not follow, or a series
added to the contract without a row, fails here rather than in a reader's dashboard.
"""

from __future__ import annotations

import re
from pathlib import Path

from exporter import promql
from exporter.oncall import forecast

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## The forecast (recorded series)"


def forecast_table_names(readme: str) -> list[str]:
    """The series named in the first column of the README's forecast table."""
    if SECTION not in readme:
        raise ValueError(f"README has no section {SECTION!r}")
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(headroom:[^`]+)` \|", section, re.MULTILINE)


def test_the_table_reads_the_first_column_of_each_row() -> None:
    text = (f"{SECTION}\n\n| series | labels | meaning |\n|---|---|---|\n"
            "| `headroom:a:bytes` | W | one, see `headroom:b:bytes` |\n"
            "| `headroom:c:rate` | W | two |\n\n## Next\n| `headroom:d:bool` | W | x |\n")
    assert forecast_table_names(text) == ["headroom:a:bytes", "headroom:c:rate"]


def test_the_readme_table_names_only_recorded_series_each_once() -> None:
    names = forecast_table_names(README.read_text(encoding="utf-8"))
    unknown = [n for n in names if n not in promql.RECORDING_RULES]
    assert not unknown, f"README forecast rows the rules do not record: {unknown}"
    assert len(names) == len(set(names)), "a series has two rows"


def test_every_series_the_alerts_and_on_call_tools_read_has_a_row() -> None:
    names = set(forecast_table_names(README.read_text(encoding="utf-8")))
    contract = {*promql.FORECAST_SERIES, *forecast.CONTRACT}
    missing = sorted(contract - names)
    assert not missing, f"contract series without a README row: {missing}"
