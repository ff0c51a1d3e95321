"""Build of specload's one C extension (the rest is in pyproject.toml).

``specload.load._fastpath`` is the load generator's per-read fast path. It is
optional: without a C compiler the install still succeeds and specload uses
the pure-Python path (same results, more CPU per streamed token).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "specload.load._fastpath",
            sources=["specload/load/_fastpath.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
