"""Query pieces the boards share: label matchers for the board variables and
the selectors built from them."""

from __future__ import annotations

from specload_boards.model import Query, range_query

VARIANTS = 'variant=~"$variant"'
MODELS = 'model=~"$model"'
CATEGORIES = 'category=~"$category"'  # the Load test board's extra variable


def selected(metric: str, *matchers: str) -> str:
    """``metric{variant=~"$variant", model=~"$model", ...}``: the series of the
    selected variants and models, narrowed by ``matchers``."""
    return f"{metric}{{{', '.join((VARIANTS, MODELS, *matchers))}}}"


def max_per_variant(metric: str) -> str:
    """``max by (variant) (metric{variant=~"$variant"})``: one line per
    selected variant."""
    return f"max by (variant) ({metric}{{{VARIANTS}}})"


def percentiles(metric: str, quantiles: tuple[int, ...], legend: str = "") -> list[Query]:
    """One line per variant and quantile of a recording-rule family
    ``metric:p<quantile>_5m``, labelled ``<variant> <legend>p<quantile>``."""
    return [
        range_query(selected(f"{metric}:p{quantile}_5m"), f"{{{{variant}}}} {legend}p{quantile}")
        for quantile in quantiles
    ]
