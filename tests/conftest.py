"""Shared pytest set-up. Fixtures live in tests/fixtures/, one module per area."""

pytest_plugins: list[str] = [
    "tests.fixtures.vllm",
    "tests.fixtures.exporter",
    "tests.fixtures.observability",
    "tests.fixtures.load",
    "tests.fixtures.sweep",
    "tests.fixtures.sim",
    "tests.fixtures.canned",
    "tests.fixtures.browser",
    "tests.fixtures.parallel",
]
