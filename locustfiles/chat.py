"""specload's Locust entry file: reasoning-aware chat users.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000 --headless -u 16 -r 16 -t 60s

specload's options (``--prompts``, ``--max-tokens``, ``--model``, ``--variant``,
``--api-key``, ``--stream``, ``--metrics-address`` …) join Locust's parser when this
file is imported, which ``locust --help`` does not do (Locust prints its help first):
``python -m specload.load.locust_help`` lists them, with their environment variables.

With the web UI, the *specload* tab shows TTFT, TPOT, output tok/s and the requests
truncated in reasoning per step and category (also ``/specload``); Locust's own
statistics count each request once (``CHAT <category>``, end-to-end time). When more
than a fifth of the completed requests ended inside their reasoning (``--max-tokens``
too small for it), the run ends with the truncation warning ``specload run`` gives.
"""

from specload.load.user import ChatUser

__all__ = ["ChatUser"]
