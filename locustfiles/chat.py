"""specload's Locust entry file: reasoning-aware chat users.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000 --headless -u 16 -r 16 -t 60s

specload's options (``--prompts``, ``--max-tokens``, ``--model``, ``--variant``,
``--api-key``, ``--stream``, ``--metrics-address`` …) appear in ``locust --help``.
"""

from specload.load.user import ChatUser

__all__ = ["ChatUser"]
