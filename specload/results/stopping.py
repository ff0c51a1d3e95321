"""A level's stopping rules: precise enough, or its verdict against a baseline known.

Two rules watch a level's measured window as its requests complete; the level ends at the
first that says so, and at its budget (``--duration``/``--requests``) whatever they say.

**Precision** (``specload run --precision 2%``): the level's metric (:data:`METRICS`,
median TPOT by default) has a 95% interval, and the level is ``precise`` once it lies within
±target of the estimate (:attr:`PrecisionRule.half_width`: the wider side over the
estimate), never before ``min_requests`` requests. For a median the interval is the
distribution-free one from order statistics (:func:`median_rank_interval`), its ranks set by
how much the count of requests below the median varies over the requests in start order
(overlapping batch means, since a closed loop's requests are correlated): it agrees with
the block bootstrap ``compare`` draws to a few percent of its width and covers the truth as
often or more (``bench/results/stopping_rules.md``), at the cost of one sort rather than
hundreds of resamples a look. The check runs every :data:`LOOK_SHARE` of the requests so
far, and sooner rather than later near the predicted stop.

**A verdict against a baseline** (``specload run --against DIR --margin 5%``): the
variant's level is compared with the baseline's level (its complete, fixed sample) as the
variant's requests arrive. The log ratio of the medians ``theta = log(m_variant / m_baseline)``
has a standard error from the same block bootstrap (the baseline's once, the variant's at
each look). At look ``k`` the **repeated confidence interval** (Jennison & Turnbull,
*Group Sequential Methods*, 2000, ch. 9) is ``theta_hat ± c_k * se_k``, where ``c_k`` is the
two-sided boundary of a group-sequential design with **Lan-DeMets error spending**, the
Pocock-type function ``alpha * ln(1 + (e - 1) t)`` (:func:`spent`), ``t`` the share of the
budget used. The boundaries hold ``P(theta outside some interval) <= alpha`` whatever the looks
(:class:`Boundary` sets each ``c_k`` from the information seen so far), so **every verdict
the intervals support is wrong with probability at most alpha (5%)**, however many looks:

- ``slower``: the interval lies above ``1 + margin`` (as a ratio of medians; for a metric
  where higher is better, ``faster``);
- ``faster``: it lies below ``1 - margin``;
- ``equivalent``: it lies within ``[1 - margin, 1 + margin]``;
- ``undecided``: none of these by the end of the budget (the last look spends what is left).

Why not "stop when the interval excludes 1": that interval is built for one look; checked
after every few requests it excludes 1 by chance far more often than 5% on two runs of the
same server (``bench/results/stopping_rules.md`` measures how often), and a margin of
practical size is what a team decides on anyway. The guarantee is about the sampling noise
*within* the two runs; a server that drifts between runs (a CPU server's median TPOT moved
16-41% between identical runs on the test machine) is outside it — choose the margin above
the run-to-run spread measured on the deployment (docs/sweep.md says how).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specload.records.request import RequestRecord
from specload.results.bootstrap import FloatArray, block_index_chunks, block_length, row_median
from specload.results.model import median

STOP_REASONS = ("precise", "decided", "budget", "interrupted")
VERDICTS = ("faster", "slower", "equivalent", "undecided")
UNDECIDED = "undecided"

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE
# A median of fewer requests has too few order statistics around it for an interval.
MIN_REQUESTS_DEFAULT = 20
# How often the rules look: when the requests so far grew by this share (or one request).
LOOK_SHARE = 0.04
# The sequential rule looks at most this often, in shares of its budget (the spending's t).
SEQUENTIAL_LOOK_STEP = 0.05
# An interval needs this many blocks of requests (at c256 a block is 256 requests: with
# fewer requests every resample is the sample itself, and its width a false zero).
MIN_BLOCKS = 5
# A rank interval's batches: at most this many lengths of the series, and never shorter than
# two bootstrap blocks (one block left the batch means' variance 25% short where requests ran
# together in fours), overlapping (Meketon & Schmeiser 1984).
RANK_BATCHES = 40
SE_BOOT = 400  # resamples for a standard error (the variant's, per look)
BASELINE_SE_BOOT = 1000  # the baseline's, once (its Monte Carlo error: about 2% of it)
BOUNDARY_PATHS = 40_000  # Monte Carlo paths of the boundary's canonical process


@dataclass(frozen=True)
class Metric:
    """A per-request figure a level can be stopped on: its record field and direction."""

    key: str
    label: str
    attr: str
    lower_is_better: bool = True

    def value(self, record: RequestRecord) -> float | None:
        """The request's value (seconds), or None: failed, or no value to take."""
        if not record.ok or not self.attr:
            return None
        raw = getattr(record, self.attr)
        if raw is None or not math.isfinite(raw) or raw < 0:
            return None
        return float(raw)

    def samples(self, records: Iterable[RequestRecord], step: str) -> list[float]:
        """The values of a level's records (``step``) in start order: a rule's sample."""
        mine = sorted((r for r in records if r.step == step), key=lambda r: r.start_s)
        return [v for r in mine if (v := self.value(r)) is not None]


METRICS: dict[str, Metric] = {
    "tpot": Metric("tpot", "median TPOT", "tpot_s"),
    "ttft": Metric("ttft", "median TTFT", "ttft_s"),
    # the level's, not a request's: ThroughputPrecision (--precision only)
    "output_tps": Metric("output_tps", "output throughput", "", lower_is_better=False),
}


def metric(key: str) -> Metric:
    try:
        return METRICS[key]
    except KeyError:
        raise ValueError(f"unknown metric {key!r} (one of {', '.join(METRICS)})") from None


# -- intervals --------------------------------------------------------------------------------

Z_975 = 1.959963984540054  # the normal's 97.5% point


def t_from_z(z: float, df: float) -> float:
    """Student's t quantile at the normal quantile ``z``'s level, ``df`` degrees of freedom
    (the Cornish-Fisher expansion; within 0.5% of the exact value from 3 degrees up)."""
    if not math.isfinite(z) or df <= 0:
        return z
    df = max(df, 1.0)
    z2 = z * z
    return z * (
        1.0
        + (z2 + 1.0) / (4.0 * df)
        + (5.0 * z2 * z2 + 16.0 * z2 + 3.0) / (96.0 * df**2)
        + (3.0 * z2**3 + 19.0 * z2**2 + 17.0 * z2 - 15.0) / (384.0 * df**3)
    )


def blocks_df(n: int, concurrency: int) -> float:
    """The degrees of freedom of a bootstrap over ``n`` requests: its blocks, less one.

    The moving-block bootstrap's interval of a median is too narrow on short samples
    (measured: its standard error 5-12% short at 20-160 requests of correlated
    requests, ``bench/results/stopping_rules.md``); widening it by Student's t on the
    number of independent blocks, as batch means are, corrects that.
    """
    return max(1.0, n / block_length(n, concurrency) - 1.0)


def rank_batch(n: int, concurrency: int) -> int:
    """The batch of :func:`median_rank_interval`'s batch means: two blocks, or n / 40."""
    return max(2 * block_length(n, concurrency), n // RANK_BATCHES)


def rank_df(n: int, concurrency: int) -> float:
    """The degrees of freedom of overlapping batch means over ``n`` requests."""
    return max(1.0, 1.5 * (n / rank_batch(n, concurrency) - 1.0))


def median_rank_interval(values: Sequence[float], concurrency: int) -> tuple[float, float, float]:
    """``(median, low, high)``: the lower median of ``values`` (in start order) and its 95%
    interval from order statistics, ``x(k - t*sd)`` to ``x(k + t*sd)``.

    ``k`` is the count of values at or below the median and ``sd`` that count's standard
    deviation. For independent requests it is ``sqrt(n p (1 - p))`` (the sign test's
    interval); requests that ran together are correlated, so ``sd`` comes from overlapping
    batch means of the indicator ``x_i <= median`` over batches of ``max(2 blocks, n / 40)``
    requests (:data:`RANK_BATCHES`), never below the independent value, with Student's
    ``t`` on the batch means' ``1.5 (n / L - 1)`` degrees of freedom. No interval before
    :data:`MIN_BLOCKS` blocks of the concurrency (``-inf, inf``): the requests that ran
    together are one sample.
    """
    data = np.asarray(values, dtype=np.float64)
    n = len(data)
    est = median(values) or 0.0
    if n < MIN_BLOCKS * block_length(n, concurrency):
        return est, -math.inf, math.inf
    batch = rank_batch(n, concurrency)
    below = data <= est
    share = float(below.mean())
    walk = np.concatenate(([0.0], np.cumsum(below - share)))
    sums = walk[batch:] - walk[:-batch]  # each batch's count less its expected count
    count_var = float(np.mean(sums * sums)) * n * n / ((n - batch) * batch) if n > batch else 0.0
    sd = math.sqrt(max(count_var, n * share * (1.0 - share)))
    t = t_from_z(Z_975, rank_df(n, concurrency))
    ordered = np.sort(data)
    ranks = np.arange(1, n + 1, dtype=np.float64)
    low, high = np.interp([n * share - t * sd, n * share + t * sd], ranks, ordered)
    return est, min(est, float(low)), max(est, float(high))


def log_median_se(
    values: Sequence[float], concurrency: int, *, n_boot: int, seed: int = 0
) -> float:
    """The moving-block bootstrap's standard error of ``log(median)``: the replicates'
    standard deviation over the median (the delta method), so a few resamples whose median
    is a TPOT of 0 (requests whose tokens came in one read) widen it rather than void it;
    infinite when the median itself is not above zero."""
    data = np.asarray(values, dtype=np.float64)
    middle = median(values) or 0.0
    if len(data) < MIN_BLOCKS * block_length(len(data), concurrency):
        return math.inf  # too few blocks: requests that ran together are one sample
    reps = _replicates(data, block_length(len(data), concurrency), n_boot, seed)
    if len(reps) < 2 or middle <= 0:
        return math.inf
    return float(np.std(reps, ddof=1)) / middle


def _replicates(data: FloatArray, block: int, n_boot: int, seed: int) -> FloatArray:
    """Medians of moving-block resamples (:mod:`specload.results.bootstrap`'s, as compare's).

    Not smoothed: the smoothed bootstrap (each value moved by a normal draw of Silverman's
    bandwidth) steadies a median's width from look to look, but on the recorded
    fixed-timing runs it made the standard error 12% short, and "slower" at the margin's
    edge came 9% of the time."""
    rng = np.random.default_rng(seed)
    out = np.empty(n_boot, dtype=np.float64)
    for lo, hi, idx in block_index_chunks(len(data), block, n_boot, rng):
        out[lo:hi] = row_median(data[idx])
    return out


def half_width(est: float, low: float, high: float) -> float:
    """The interval's wider side over the estimate (a ratio: 0.02 is ±2%)."""
    return max(est - low, high - est) / est if est > 0 else math.inf


# -- precision ----------------------------------------------------------------------------------


@dataclass
class PrecisionRule:
    """Ends a level once its metric's 95% interval is within ±``target`` of the estimate.

    Each look's interval is :func:`median_rank_interval`'s, no narrower than the one all
    looks so far predict (their half-widths times ``sqrt(n)`` fall on one "unit" width,
    whose median is steady where one look's is not): stopping at the first look whose own
    interval happened to come out narrow stops on luck (the truth was then inside 87-93% of
    stopped intervals, against 97% at a fixed size; ``bench/results/stopping_rules.md``).
    """

    target: float  # a ratio of the estimate (0.02: ±2%)
    concurrency: int = 1
    min_requests: int = MIN_REQUESTS_DEFAULT
    values: list[tuple[float, float]] = field(default_factory=list)  # (start_s, value)
    half_width: float | None = None  # at the last look (None: not looked yet)
    estimate: float | None = None
    interval: tuple[float, float] | None = None
    looked_at: int = 0  # requests at the last look
    reached_at: int | None = None  # requests when it was precise
    units: list[float] = field(default_factory=list)  # half-width x sqrt(n) / t at each look
    next_at: int = 0  # the next look waits for this many requests (the predicted stop, near)

    def add(self, start_s: float, value: float) -> None:
        self.values.append((start_s, value))

    def due(self) -> bool:
        n = len(self.values)
        step = n - self.looked_at >= max(1, math.ceil(LOOK_SHARE * n))
        return n >= max(self.min_requests, self.next_at) and step

    def look(self, now_s: float | None = None) -> bool:
        """Compute the interval now (``now_s``: unused, as :class:`ThroughputPrecision`'s);
        True when it is precise enough."""
        n = len(self.values)
        self.looked_at = n
        if n < max(self.min_requests, 2):
            return False
        ordered = [v for _, v in sorted(self.values)]
        est, low, high = median_rank_interval(ordered, self.concurrency)
        width = half_width(est, low, high)
        if low == -math.inf:  # too few blocks for an interval: none before five of them
            self.next_at = max(self.next_at, MIN_BLOCKS * self.concurrency)
        t = t_from_z(Z_975, rank_df(n, self.concurrency))
        if math.isfinite(width):
            self.units.append(width * math.sqrt(n) / t)
        predicted = float(np.median(self.units)) * t / math.sqrt(n) if self.units else math.inf
        if width < predicted and est > 0:
            # this look came out narrower than its looks predict: widen its sides to that
            if width > 0:
                scale = predicted / width
                low, high = est - scale * (est - low), est + scale * (high - est)
            else:  # a lump of equal values about the median: both sides alike
                low, high = est * (1.0 - predicted), est * (1.0 + predicted)
            width = predicted
        self.estimate, self.interval, self.half_width = est, (low, high), width
        if width <= self.target:
            self.reached_at = n
            return True
        if self.units:
            # The next look comes near where the units predict the target (80% of the way),
            # no sooner than the usual 4% and no later than half again: 5-7 looks a level
            # instead of 30-50 (bench/results/precision_cpu.md).
            wanted = 0.8 * (float(np.median(self.units)) * Z_975 / self.target) ** 2
            self.next_at = int(min(max(wanted, n * (1 + LOOK_SHARE)), n * 1.5))
        return False


#: ``--precision-metric output_tps``: the level's output throughput, not a per-request figure.
THROUGHPUT = "output_tps"
THROUGHPUT_BIN_S = 0.25  # tokens are counted in bins this long from the window's start
MAX_BATCHES = 40  # ... and judged in at most this many batches of bins


@dataclass
class ThroughputPrecision:
    """Ends a level once its output throughput (tokens that *arrived* in the window over its
    length, ``summary.json``'s ``output_throughput``) is known to ±``target``.

    Tokens go into :data:`THROUGHPUT_BIN_S` bins by arrival (every request's, whatever its
    step, as the window's throughput counts them). A look judges the bins up to ``now``
    less the longest request seen so far (later bins still wait for tokens of requests in
    flight), grouped into at most :data:`MAX_BATCHES` equal batches: the estimate is their
    mean rate, the interval the method of batch means, ``t(b - 1) * sd / sqrt(b)`` — the
    interval ``compare`` draws by bootstrapping the mean of time bins, in closed form.
    """

    target: float
    min_requests: int = MIN_REQUESTS_DEFAULT
    start_s: float | None = None  # the window's start (wall clock)
    end_s: float | None = None  # its end, once it ended: no bin after it is judged
    bins: list[float] = field(default_factory=list)
    longest_s: float = 0.0
    requests: int = 0  # the level's requests seen (the minimum and the look schedule)
    half_width: float | None = None
    estimate: float | None = None
    interval: tuple[float, float] | None = None
    looked_at: int = 0
    reached_at: int | None = None

    def add_record(self, record: RequestRecord, mine: bool) -> None:
        """A record whose tokens may fall in the window (``mine``: of this level's step)."""
        if self.start_s is None:
            return
        self.requests += mine
        last = max(record.end_s, record.start_s + (record.e2e_s or 0.0))
        if last <= self.start_s or record.tokens_output <= 0:
            return
        self.longest_s = max(self.longest_s, last - record.start_s)
        first = max(0, int((record.start_s - self.start_s) / THROUGHPUT_BIN_S))
        end = int((last - self.start_s) / THROUGHPUT_BIN_S)
        if end >= len(self.bins):
            self.bins.extend([0.0] * (end + 1 - len(self.bins)))
        for k in range(first, end + 1):
            lo = self.start_s + k * THROUGHPUT_BIN_S
            self.bins[k] += record.tokens_between(lo, lo + THROUGHPUT_BIN_S)

    def due(self) -> bool:
        n = self.requests
        return n >= self.min_requests and n - self.looked_at >= max(1, math.ceil(LOOK_SHARE * n))

    def look(self, now_s: float | None = None) -> bool:
        """Judge the bins that are complete by ``now_s`` (wall clock); True when precise."""
        self.looked_at = self.requests
        if self.start_s is None or now_s is None:
            return False
        usable = int((now_s - self.longest_s - self.start_s) / THROUGHPUT_BIN_S)
        usable = min(usable, len(self.bins))
        if self.end_s is not None:
            usable = min(usable, int((self.end_s - self.start_s) / THROUGHPUT_BIN_S))
        batches = min(MAX_BATCHES, usable // 2)
        if batches < 4:
            return False
        size = usable // batches
        rates = np.asarray(self.bins[: batches * size]).reshape(batches, size).sum(axis=1) / (
            size * THROUGHPUT_BIN_S
        )
        mean = float(rates.mean())
        half = t_from_z(Z_975, batches - 1) * float(rates.std(ddof=1)) / math.sqrt(batches)
        self.estimate, self.interval = mean, (mean - half, mean + half)
        self.half_width = half / mean if mean > 0 else math.inf
        if self.half_width <= self.target and self.requests >= self.min_requests:
            self.reached_at = self.requests
            return True
        return False


# -- the sequential verdict ----------------------------------------------------------------------


def spent(t: float, alpha: float = ALPHA) -> float:
    """The error spent by budget share ``t``: Lan-DeMets, Pocock type: ``alpha ln(1+(e-1) t)``."""
    t = min(max(t, 0.0), 1.0)
    return alpha * math.log1p((math.e - 1.0) * t)


class Boundary:
    """Two-sided group-sequential boundaries ``c_k`` by error spending, for any looks.

    The standardised statistics ``Z_k`` of a sequence of looks with (estimated)
    information ``I_k`` are, in the limit, Brownian motion ``S(I) / sqrt(I)``
    (the canonical joint distribution: ``corr(Z_j, Z_k) = sqrt(I_j / I_k)``, which holds here
    too although the baseline's sample is fixed: its error is a shared constant in every
    look). ``c_k`` is set so that the paths crossing first at look ``k`` are the error
    ``spent(t_k) - spent(t_{k-1})``: computed on :data:`BOUNDARY_PATHS` Monte Carlo paths of
    that process (fixed seed, so the same looks give the same boundaries), which spends the
    error exactly up to ``1 / paths`` per look.
    """

    def __init__(self, alpha: float = ALPHA, paths: int = BOUNDARY_PATHS, seed: int = 0) -> None:
        self.alpha = alpha
        self.rng = np.random.default_rng(seed)
        self.paths = paths
        self.s = np.zeros(paths)
        self.alive = np.ones(paths, dtype=bool)
        self.info = 0.0
        self.t = 0.0
        self.spent = 0.0
        self.values: list[float] = []

    def next(self, info: float, t: float) -> float:
        """The boundary at a look with information ``info`` at budget share ``t`` (1: last)."""
        info = max(info, self.info)  # information never falls (an estimate may)
        step = info - self.info
        if step > 0:
            self.s += math.sqrt(step) * self.rng.standard_normal(self.paths)
        self.info = info
        target = spent(t, self.alpha) if t < 1.0 else self.alpha
        self.t = max(self.t, t)
        count = round((target - self.spent) * self.paths)
        z = np.abs(self.s[self.alive]) / math.sqrt(info) if info > 0 else np.zeros(0)
        if count <= 0 or len(z) == 0:
            c = math.inf
        elif count >= len(z):
            c = 0.0
        else:
            c = float(np.partition(z, len(z) - count)[len(z) - count])
        if math.isfinite(c):
            crossed = self.alive.copy()
            crossed[self.alive] = z >= c
            self.spent += crossed.sum() / self.paths
            self.alive &= ~crossed
        self.values.append(c)
        return c


@dataclass(frozen=True)
class Look:
    requests: int
    t: float
    ratio: float | None  # variant / baseline medians (None: a median of zero)
    low: float | None  # the repeated confidence interval of the ratio (None: not taken)
    high: float | None
    boundary: float
    verdict: str | None


def judge(low: float, high: float, margin: float, lower_is_better: bool = True) -> str | None:
    """The verdict an interval of the ratio (variant / baseline) supports, or None."""
    if low > 1.0 + margin:
        return "slower" if lower_is_better else "faster"
    if high < 1.0 - margin:
        return "faster" if lower_is_better else "slower"
    if low >= 1.0 - margin and high <= 1.0 + margin:
        return "equivalent"
    return None


@dataclass
class SequentialRule:
    """A variant level's verdict against the baseline's level, known as early as it can be.

    ``baseline``: the baseline level's values in start order (complete). ``budget`` is the
    level's ``--requests`` (None: a window by time; the driver gives ``t`` itself).
    """

    baseline: Sequence[float]
    margin: float
    budget: int | None = None
    concurrency: int = 1
    min_requests: int = MIN_REQUESTS_DEFAULT
    lower_is_better: bool = True
    alpha: float = ALPHA
    n_boot: int = SE_BOOT
    seed: int = 0
    # The naive rule bench/stopping_rules.py measures beside this one: the same boundary
    # ``fixed_z`` at every look (1.96: a plain 95% interval each time), no error spending.
    fixed_z: float | None = None
    values: list[tuple[float, float]] = field(default_factory=list)  # (start_s, value)
    looks: list[Look] = field(default_factory=list)
    verdict: str | None = None
    verdict_requests: int | None = None
    _boundary: Boundary | None = None
    _baseline: tuple[float, float] | None = None  # (log median, se)
    _next_t: float = 0.0

    def __post_init__(self) -> None:
        if len(self.baseline) < max(self.min_requests, 2):
            raise ValueError(
                f"the baseline level has {len(self.baseline)} requests with a value, fewer "
                f"than {max(self.min_requests, 2)}"
            )
        middle = median(self.baseline) or 0.0
        if middle <= 0:
            raise ValueError(f"the baseline level's median is {middle:g}: no ratio can be taken")
        est = math.log(middle)
        se = log_median_se(self.baseline, self.concurrency, n_boot=BASELINE_SE_BOOT, seed=self.seed)
        self._baseline = (est, se)
        self._boundary = Boundary(self.alpha, seed=self.seed)

    @property
    def decided(self) -> bool:
        return self.verdict is not None

    def add(self, start_s: float, value: float) -> None:
        self.values.append((start_s, value))

    def share(self) -> float:
        """The budget used so far by requests (a window by time: 0, the driver says)."""
        return len(self.values) / self.budget if self.budget else 0.0

    def due(self, t: float | None = None) -> bool:
        if self.decided or len(self.values) < self.min_requests:
            return False
        t = self.share() if t is None else t
        return t >= self._next_t or t >= 1.0

    def look(self, t: float | None = None, *, last: bool = False) -> str | None:
        """A look at budget share ``t`` (default: requests over budget); ``last``: the budget
        is spent (what is left of alpha is spent now; no verdict -> ``undecided``)."""
        if self.decided:
            return self.verdict
        t = 1.0 if last else min(self.share() if t is None else t, 1.0)
        n = len(self.values)
        spent_all = self.looks and self.looks[-1].t >= 1.0
        if last and spent_all and self.looks[-1].requests == n:
            # the look at the budget's end came already and spent all of alpha: its
            # interval is the level's last word, not a new one with nothing left to spend
            self.verdict, self.verdict_requests = UNDECIDED, n
            return self.verdict
        if n < max(self.min_requests, 2):
            if last:
                self.verdict, self.verdict_requests = UNDECIDED, n
            return self.verdict
        assert self._boundary is not None and self._baseline is not None
        while self._next_t <= t:
            self._next_t += SEQUENTIAL_LOOK_STEP
        ordered = [v for _, v in sorted(self.values)]
        middle = median(ordered) or 0.0
        se_v = log_median_se(ordered, self.concurrency, n_boot=self.n_boot, seed=self.seed + n)
        se_b = self._baseline[1]
        se = math.sqrt(se_v**2 + se_b**2)
        if middle <= 0 or not 0 < se < math.inf:
            # no ratio (a zero median) or no spread to judge it by: no verdict at this look
            self.looks.append(Look(n, t, None, None, None, math.inf, None))
            if last:
                self.verdict, self.verdict_requests = UNDECIDED, n
            return self.verdict
        theta = math.log(middle) - self._baseline[0]
        z = (
            self._boundary.next(1.0 / se**2, 1.0 if last else t)
            if self.fixed_z is None
            else self.fixed_z
        )
        # the standard errors are estimates: Student's t on their blocks (Welch's df)
        df_v = blocks_df(n, self.concurrency)
        df_b = blocks_df(len(self.baseline), self.concurrency)
        spread = se_v**4 / df_v + se_b**4 / df_b
        c = t_from_z(z, se**4 / spread if spread > 0 else math.inf)
        low, high = math.exp(theta - c * se), math.exp(theta + c * se)
        found = judge(low, high, self.margin, self.lower_is_better)
        self.looks.append(Look(n, t, math.exp(theta), low, high, c, found))
        if found is not None or last:
            self.verdict = found or UNDECIDED
            self.verdict_requests = n
        return self.verdict

    @property
    def last(self) -> Look | None:
        return self.looks[-1] if self.looks else None
