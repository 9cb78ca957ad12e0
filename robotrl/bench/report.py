"""How every benchmark reports: a rich table for people, then one JSON line last."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def report(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    result: Mapping[str, Any],
) -> None:
    """Print ``rows`` as a table titled ``title``, then ``result`` as the final JSON line."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right" if col != columns[0] else "left")
    for row in rows:
        table.add_row(*(f"{v:,.1f}" if isinstance(v, float) else str(v) for v in row))
    Console(highlight=False).print(table)
    print(json.dumps(dict(result)), flush=True)
