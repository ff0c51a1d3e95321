"""specload: measure whether a vLLM service variant really decodes faster.

The public surface is the ``specload`` command (``specload.cli``) and the
Locust entry files under ``locustfiles/``; the modules below are small and
each has one responsibility (see docs/ARCHITECTURE.md).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
