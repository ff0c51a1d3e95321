"""The commands: one module per ``specload`` subcommand (``add_arguments`` and ``run``) and
the demo. The top floor: a command may import any library; no library imports a command
(``tests/unit/test_imports.py``)."""
