"""When two runs' client overheads differ enough to matter.

A client's TTFT and TPOT hold the server's time plus the network's and the client's own
(``specload.records.servertiming``: client minus server, when the server sends its own timing:
vLLM ``--enable-per-request-metrics``). A difference ``compare`` reports between two runs is
the servers' only while the overheads are alike. The rule, per level and measure (TTFT with
the level's median TTFT-minus-server, TPOT with its median ITL-minus-server): warn when

    |overhead B - overhead A|
        >= OVERHEAD_SHARE x max(|median B - median A|, min_difference x median A)

— the overheads differ by at least a quarter of the difference reported, or of the smallest
difference compare would call a verdict (``--min-difference`` of the reference), whichever is
larger: at that size the client and the network could make, hide or flip a verdict. Runs
without the server's timing on either side are not judged here (their ``client_saturated``
flag, a warning of its own, says when the client itself may have biased them).
"""

from __future__ import annotations

from collections.abc import Sequence

#: The share of the reported (or smallest called) difference an overhead difference may reach.
OVERHEAD_SHARE = 0.25
#: (measure compared, its overhead: the figure's name in the model, title, overhead's title)
MEASURES = (
    ("ttft", "ttft", "TTFT", "TTFT minus the server's"),
    ("tpot", "itl", "TPOT", "ITL minus the server's"),
)


def overhead_warning(
    level_label: str,
    *,
    measure_title: str,
    overhead_title: str,
    labels: Sequence[str],
    medians: Sequence[float | None],
    overheads: Sequence[float | None],
    min_difference: float,
) -> list[str]:
    """The warnings of one level and measure: each run after the first against the first
    (``medians`` and ``overheads`` in ms, one per run; None: not measured)."""
    out: list[str] = []
    a, ref = medians[0], overheads[0]
    if a is None or ref is None or a <= 0:
        return out
    for i in range(1, len(labels)):
        b, var = medians[i], overheads[i]
        if b is None or var is None:
            continue
        reported = abs(b - a)
        floor = min_difference * a
        delta = abs(var - ref)
        if delta < OVERHEAD_SHARE * max(reported, floor):
            continue
        out.append(
            f"{level_label}: client overheads differ: {overhead_title} median {ref:.2f} ms "
            f"({labels[0]}) vs {var:.2f} ms ({labels[i]}), {delta:.2f} ms apart against a "
            f"{measure_title} difference of {b - a:+.2f} ms ({(b / a - 1) * 100:+.1f}%; "
            f"--min-difference {min_difference * 100:g}% is {floor:.2f} ms): at least "
            f"{OVERHEAD_SHARE:.0%} of it may be the clients and the network, not the "
            "servers — measure both from the same client machine, load and network"
        )
    return out
