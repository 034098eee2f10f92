"""Tables of bootstrap estimates as Markdown, CSV and LaTeX."""

from __future__ import annotations

import csv
import io

from lamella.eval._src.estimates import Estimates, ImprovementEstimates

__all__ = ["estimates_table", "improvement_table", "to_csv", "to_latex", "to_markdown"]

Table = tuple[list[str], list[list[str]]]


def _cell(point: float, low: float, high: float, digits: int) -> str:
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def estimates_table(estimates: Estimates, digits: int = 3) -> Table:
    """Rows of algorithms, a column per statistic, cells ``point [lower, upper]``.

    Only for final aggregates and profiles (one value per label); for curves, pass
    ``Estimates`` of one evaluation.
    """
    header = ["algorithm", *(str(label) for label in estimates.labels)]
    rows = []
    for algorithm, point in estimates.point.items():
        if point.ndim != 1:
            raise ValueError(
                f"estimates of {algorithm!r} have shape {point.shape}; tables take one value per label"
            )
        lower, upper = estimates.lower[algorithm], estimates.upper[algorithm]
        rows.append([algorithm, *(_cell(point[k], lower[k], upper[k], digits) for k in range(len(point)))])
    return header, rows


def improvement_table(improvement: ImprovementEstimates, digits: int = 3) -> Table:
    """One row per pair: ``x``, ``y``, ``P(x > y) [lower, upper]``."""
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
