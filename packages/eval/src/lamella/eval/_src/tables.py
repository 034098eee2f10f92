"""Tables of bootstrap estimates as Markdown, CSV and LaTeX."""

from __future__ import annotations

import csv
import io

from lamella.eval._src.errors import EvalError
from lamella.eval._src.estimates import Estimates, ImprovementEstimates, require_kind

__all__ = [
    "estimates_table",
    "improvement_table",
    "parse_config_label",
    "ranking_table",
    "to_csv",
    "to_latex",
    "to_markdown",
]

Table = tuple[list[str], list[list[str]]]


def _cell(point: float, low: float, high: float, digits: int) -> str:
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def estimates_table(estimates: Estimates, digits: int = 3) -> Table:
    """Rows of algorithms, a column per statistic, cells ``point [lower, upper]``.

    Only for final aggregates and profiles (one value per label); for curves, pass
    ``Estimates`` of one evaluation.

    Raises:
        EvalError: ``estimates`` of :func:`sample_efficiency` or
            :func:`probability_of_improvement_estimates` (use :func:`improvement_table`), or of
            several calls merged.
    """
    require_kind(estimates, "estimates_table", "interval_estimates", "performance_profiles")
    header = ["algorithm", *(str(label) for label in estimates.labels)]
    rows = []
    for algorithm, point in estimates.point.items():
        lower, upper = estimates.lower[algorithm], estimates.upper[algorithm]
        rows.append([algorithm, *(_cell(point[k], lower[k], upper[k], digits) for k in range(len(point)))])
    return header, rows


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text:
        depth += (char in "([") - (char in ")]")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    return [*items, current]


def parse_config_label(name: str) -> tuple[str, dict[str, str]] | None:
    """``"ppo[learning_rate=0.001,num_envs=8]"`` -> ``("ppo", {"learning_rate": "0.001", "num_envs": "8"})``.

    The run-log ``algorithm`` name of one config of a sweep (docs/run-log-format.md, "Sweeps");
    None for a name of another form.
    """
    if not name.endswith("]") or "[" not in name:
        return None
    base, _, inner = name[:-1].partition("[")
    settings = {}
    for item in _split_top_level(inner):
        key, sep, value = item.partition("=")
        if not sep or not key or key in settings:
            return None
        settings[key] = value
    return (base, settings) if base and settings else None


def ranking_table(estimates: Estimates, statistic: str = "iqm", digits: int = 3) -> Table:
    """Algorithms ranked by ``statistic`` (best first; lowest first for the optimality gap).

    Columns: ``rank``, ``algorithm``, one column per swept setting when every name is a sweep
    config label (:func:`parse_config_label`), ``<statistic> [lower, upper]``, and ``overlaps
    best``: whether the interval overlaps the best one's (``yes``: not separated from it at this
    confidence).

    Raises:
        EvalError: ``estimates`` not of :func:`interval_estimates` (or of several calls merged), or
            a ``statistic`` they do not hold.
    """
    require_kind(estimates, "ranking_table", "interval_estimates")
    if statistic not in estimates.labels:
        raise EvalError(
            f"ranking_table: statistic {statistic!r} is not estimated; estimated: {list(estimates.labels)}"
        )
    k = list(estimates.labels).index(statistic)
    sign = 1.0 if statistic == "optimality_gap" else -1.0
    order = sorted(estimates.point, key=lambda a: (sign * float(estimates.point[a][k]), a))
    parsed = {a: parse_config_label(a) for a in order}
    keys: list[str] = []
    if all(p is not None for p in parsed.values()):
        for p in parsed.values():
            keys += [key for key in p[1] if key not in keys]  # type: ignore[index]
    best = order[0]
    low_best, high_best = float(estimates.lower[best][k]), float(estimates.upper[best][k])
    header = ["rank", "algorithm", *keys, f"{statistic} [{estimates.confidence:.0%} CI]", "overlaps best"]
    rows = []
    for rank, algorithm in enumerate(order, 1):
        point, low, high = (
            float(x[algorithm][k]) for x in (estimates.point, estimates.lower, estimates.upper)
        )
        settings = parsed[algorithm][1] if keys else {}  # type: ignore[index]
        overlaps = "best" if rank == 1 else ("yes" if low <= high_best and high >= low_best else "no")
        rows.append(
            [
                str(rank),
                algorithm,
                *(settings.get(key, "") for key in keys),
                _cell(point, low, high, digits),
                overlaps,
            ]
        )
    return header, rows


def improvement_table(improvement: ImprovementEstimates, digits: int = 3) -> Table:
    """One row per pair: ``x``, ``y``, ``P(x > y) [lower, upper]``.

    Raises:
        EvalError: ``improvement`` not of :func:`probability_of_improvement_estimates`.
    """
    require_kind(improvement, "improvement_table", "probability_of_improvement_estimates")
    rows = [
        [x, y, _cell(improvement.point[i], improvement.lower[i], improvement.upper[i], digits)]
        for i, (x, y) in enumerate(improvement.pairs)
    ]
    return ["x", "y", "P(x > y)"], rows


def to_markdown(table: Table) -> str:
    """A GitHub-flavoured Markdown table."""
    header, rows = table
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """CSV text (RFC 4180 quoting)."""
    header, rows = table
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


_LATEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
}


def _escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(table: Table, caption: str | None = None) -> str:
    """A ``tabular`` (booktabs rules) inside a ``table`` environment."""
    header, rows = table
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}",
        r"\toprule",
    ]
    lines.append(" & ".join(_escape(h) for h in header) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(_escape(c) for c in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(r"\caption{" + _escape(caption) + "}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
