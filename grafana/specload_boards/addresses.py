"""The four boards' UIDs, URL slugs and titles, apart from the boards
themselves because boards link to each other."""

from __future__ import annotations

from specload_boards.model import BoardAddress

OVERVIEW = BoardAddress("specload-overview", "specload-overview", "Specload / Overview")
VARIANT_COMPARISON = BoardAddress(
    "specload-variants", "specload-variant-comparison", "Specload / Variant comparison"
)
RELOAD = BoardAddress("specload-reload", "specload-reload", "Specload / Reload")
LOAD_TEST = BoardAddress("specload-loadtest", "specload-load-test", "Specload / Load test")
