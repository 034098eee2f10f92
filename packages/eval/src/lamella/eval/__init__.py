"""lamella-eval: read run logs, aggregate with bootstrap confidence intervals, plot, tabulate.

The metric definitions and the bootstrap follow rliable 1.2 (same point estimates,
bit for bit; confidence bounds within Monte-Carlo error), computed with JAX.
``evaluate_checkpoints`` evaluates lamella-agents checkpoints on test envs (it needs the
``lamella-eval[checkpoints]`` extra and imports lamella-envs and lamella-agents only when
called, so the rest works without them). Mistakes in the input raise :class:`EvalError`
(a ``ValueError``), which the ``lamella`` command prints as one line with exit status 2.
"""

from typing import TYPE_CHECKING, Any

from lamella.eval.__about__ import __version__
from lamella.eval._src.bootstrap import (
    STATISTICS,
    Estimates,
    ImprovementEstimates,
    interval_estimates,
    performance_profiles,
    probability_of_improvement_estimates,
    sample_efficiency,
)
from lamella.eval._src.checkpoints import (
    CheckpointResult,
    EnvSpec,
    ResultSummary,
    evaluate_checkpoints,
    parse_env_spec,
    summarize_results,
    summary_table,
    test_suites,
    write_results_csv,
    write_results_run_log,
    write_summary,
)
from lamella.eval._src.errors import EvalError, EvalFileNotFoundError, MissingExtraError
from lamella.eval._src.metrics import (
    iqm,
    mean,
    median,
    optimality_gap,
    performance_profile,
    probability_of_improvement,
)
from lamella.eval._src.runlog import (
    CSV_HEADER,
    Evaluation,
    Run,
    RunLogError,
    read_csv,
    read_run_log,
    read_run_logs,
    runs_from_dict,
    write_csv,
)
from lamella.eval._src.scores import Curves, Scores, curve_scores, final_scores, normalize
from lamella.eval._src.tables import (
    estimates_table,
    improvement_table,
    parse_config_label,
    ranking_table,
    to_csv,
    to_latex,
    to_markdown,
)

__all__ = [
    "CSV_HEADER",
    "STATISTICS",
    "CheckpointResult",
    "Curves",
    "EnvSpec",
    "Estimates",
    "EvalError",
    "EvalFileNotFoundError",
    "Evaluation",
    "ImprovementEstimates",
    "MissingExtraError",
    "ResultSummary",
    "Run",
    "RunLogError",
    "Scores",
    "__version__",
    "curve_scores",
    "estimates_table",
    "evaluate_checkpoints",
    "final_scores",
    "improvement_table",
    "interval_estimates",
    "iqm",
    "mean",
    "median",
    "normalize",
    "optimality_gap",
    "parse_config_label",
    "parse_env_spec",
    "performance_profile",
    "performance_profiles",
    "plot_interval_estimates",
    "plot_performance_profiles",
    "plot_probability_of_improvement",
    "plot_sample_efficiency",
    "probability_of_improvement",
    "probability_of_improvement_estimates",
    "ranking_table",
    "read_csv",
    "read_run_log",
    "read_run_logs",
    "runs_from_dict",
    "sample_efficiency",
    "summarize_results",
    "summary_table",
    "test_suites",
    "to_csv",
    "to_latex",
    "to_markdown",
    "write_csv",
    "write_results_csv",
    "write_results_run_log",
    "write_summary",
]

# The plots import matplotlib (about as long as everything else together): loaded on first use.
_PLOTS = (
    "plot_interval_estimates",
    "plot_performance_profiles",
    "plot_probability_of_improvement",
    "plot_sample_efficiency",
)
if TYPE_CHECKING:
    from lamella.eval._src.plots import (
        plot_interval_estimates,
        plot_performance_profiles,
        plot_probability_of_improvement,
        plot_sample_efficiency,
    )


def __getattr__(name: str) -> Any:
    if name in _PLOTS:
        from lamella.eval._src import plots

        return getattr(plots, name)
    raise AttributeError(f"module 'lamella.eval' has no attribute {name!r}")
