"""specload's Grafana boards as code.

:mod:`~specload_boards.model` is what a board is made of, one module per board
says what it shows (:mod:`~specload_boards.overview`, ``reload``,
``variant_comparison``, ``load_test``), and :mod:`~specload_boards.render`
writes Grafana's JSON. ``grafana/generate.py`` puts that JSON in
``grafana/dashboards/``.
"""

from __future__ import annotations

from specload_boards import load_test, overview, reload, variant_comparison
from specload_boards.model import Board

#: In the order the generator writes them.
BOARDS: tuple[Board, ...] = (
    overview.BOARD,
    reload.BOARD,
    variant_comparison.BOARD,
    load_test.BOARD,
)
