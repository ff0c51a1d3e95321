"""What the local stack runs: parts, ports and commands (no side effects).

Parts, in start order: one simulated vLLM per variant, Alertmanager, the
exporter, Prometheus and, when workers are asked for, a Locust master and its
workers. Ports are the documented defaults (those of ``deploy/prometheus``'s
target lists) or, with ``free_ports``, any free ones the OS hands out.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import specload
from specload.errors import UsageError

HOST = "127.0.0.1"
#: Locust workers ``up --workers`` starts at most (as ``specload run --workers``).
MAX_WORKERS = 256

#: Default ports; a variant's sim takes ``sim + i`` and ``control + i``.
DEFAULT_PORTS: Mapping[str, int] = {
    "sim": 8000,
    "control": 8100,
    "exporter": 9464,
    "prometheus": 9090,
    "alertmanager": 9093,
    "locust-web": 8089,
    "locust-master": 5557,
    "loadgen-metrics": 9647,
}


@dataclass(frozen=True)
class Part:
    name: str
    kind: str  # sim | alertmanager | exporter | prometheus | locust-master | locust-worker
    argv: tuple[str, ...]
    log: Path
    url: str | None = None
    #: Answers 2xx once the part is ready; None: a live process is healthy.
    health_url: str | None = None
    ports: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StackOptions:
    state_dir: Path
    repo: Path
    variants: tuple[str, ...] = ("baseline", "ngram")
    workers: int = 0
    free_ports: bool = False
    load_time_s: float = 10.0
    time_scale: float | None = None
    scrape_interval_s: float = 5.0
    #: Baseline files (``specload baseline export``) the exporter serves; may appear later.
    baselines: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Plan:
    options: StackOptions
    parts: tuple[Part, ...]

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(name)

    def of_kind(self, kind: str) -> list[Part]:
        return [p for p in self.parts if p.kind == kind]


def find_repo(explicit: str | None = None) -> Path:
    """The folder holding ``deploy/`` and ``locustfiles/`` (the source tree)."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get("SPECLOAD_REPO"):
        candidates.append(Path(os.environ["SPECLOAD_REPO"]))
    else:
        candidates += [Path.cwd(), Path(specload.__file__).resolve().parent.parent]
    for candidate in candidates:
        if (candidate / "deploy" / "prometheus" / "prometheus.yml").is_file():
            return candidate.resolve()
    name = "--repo" if explicit else "specload source tree"
    raise UsageError(
        f"{name}: no deploy/prometheus/prometheus.yml under "
        f"{', '.join(str(c) for c in candidates)}; run from the specload checkout or give --repo"
    )


def find_binary(name: str, *fallbacks: str) -> str:
    for candidate in (name, *fallbacks):
        found = shutil.which(candidate)
        if found:
            return found
    raise UsageError(f"{name}: not found on PATH; run scripts/bootstrap.sh (Debian package)")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def allocate_ports(names: list[str], free_ports: bool) -> dict[str, int]:
    """Ports for ``names`` (``sim:baseline``, ``exporter``…); defaults must be free."""
    if free_ports:
        socks: list[socket.socket] = []
        try:
            for _ in names:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind((HOST, 0))
                socks.append(sock)
            return {n: s.getsockname()[1] for n, s in zip(names, socks, strict=True)}
        finally:
            for sock in socks:
                sock.close()
    ports: dict[str, int] = {}
    index: dict[str, int] = {}
    for name in names:
        base = name.split(":", 1)[0]
        i = index.get(base, 0)
        index[base] = i + 1
        ports[name] = DEFAULT_PORTS[base] + i
    busy = [f"{n} ({p})" for n, p in ports.items() if not _port_free(p)]
    if busy:
        raise UsageError(
            f"port(s) in use: {', '.join(busy)}; stop what holds them or use --free-ports"
        )
    return ports


def check_options(options: StackOptions) -> None:
    """The options alone (variants, workers): one-line errors before anything is created."""
    if not options.variants:
        raise UsageError("--variants: give at least one variant")
    if len(set(options.variants)) != len(options.variants):
        raise UsageError(f"--variants: {','.join(options.variants)} names a variant twice")
    reserved = {"exporter", "prometheus", "alertmanager", "locust-master"}
    for variant in options.variants:
        if variant in reserved or variant.startswith("locust-worker"):
            raise UsageError(f"--variants: {variant!r} is the name of another part")
    if options.workers < 0:
        raise UsageError(f"--workers: {options.workers} must be 0 or more")
    if options.workers > MAX_WORKERS:
        raise UsageError(f"--workers: {options.workers} is beyond the limit of {MAX_WORKERS}")


def build_plan(options: StackOptions) -> Plan:
    check_options(options)
    state = options.state_dir
    logs = state / "logs"
    python = sys.executable
    prometheus = find_binary("prometheus")
    alertmanager = find_binary("prometheus-alertmanager", "alertmanager")

    names = [f"sim:{v}" for v in options.variants] + [f"control:{v}" for v in options.variants]
    names += ["exporter", "prometheus", "alertmanager"]
    if options.workers:
        names += ["locust-web", "locust-master", "loadgen-metrics"]
    ports = allocate_ports(names, options.free_ports)

    parts: list[Part] = []
    for variant in options.variants:
        port, control = ports[f"sim:{variant}"], ports[f"control:{variant}"]
        argv = [
            python,
            "-m",
            "specload",
            "sim",
            "--variant",
            variant,
            "--port",
            str(port),
            "--control-port",
            str(control),
            "--log-file",
            str(logs / f"{variant}.vllm.log"),
            "--load-time",
            f"{options.load_time_s:g}",
        ]
        if options.time_scale is not None:
            argv += ["--time-scale", f"{options.time_scale:g}"]
        parts.append(
            Part(
                variant,
                "sim",
                tuple(argv),
                logs / f"{variant}.log",
                url=f"http://{HOST}:{port}",
                health_url=f"http://{HOST}:{port}/health",
                ports={"port": port, "control": control},
            )
        )
    am = ports["alertmanager"]
    parts.append(
        Part(
            "alertmanager",
            "alertmanager",
            (
                alertmanager,
                f"--config.file={options.repo / 'deploy' / 'alertmanager' / 'alertmanager.yml'}",
                f"--storage.path={state / 'alertmanager'}",
                f"--web.listen-address={HOST}:{am}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ),
            logs / "alertmanager.log",
            url=f"http://{HOST}:{am}",
            health_url=f"http://{HOST}:{am}/-/ready",
            ports={"port": am},
        )
    )
    exporter = ports["exporter"]
    parts.append(
        Part(
            "exporter",
            "exporter",
            (python, "-m", "specload", "exporter", "--config", str(state / "exporter.yaml")),
            logs / "exporter.log",
            url=f"http://{HOST}:{exporter}/metrics",
            health_url=f"http://{HOST}:{exporter}/metrics",
            ports={"port": exporter},
        )
    )
    prom = ports["prometheus"]
    parts.append(
        Part(
            "prometheus",
            "prometheus",
            (
                prometheus,
                f"--config.file={state / 'prometheus' / 'prometheus.yml'}",
                f"--storage.tsdb.path={state / 'prometheus' / 'data'}",
                f"--web.listen-address={HOST}:{prom}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ),
            logs / "prometheus.log",
            url=f"http://{HOST}:{prom}",
            health_url=f"http://{HOST}:{prom}/-/ready",
            ports={"port": prom},
        )
    )
    if options.workers:
        web, master, metrics = ports["locust-web"], ports["locust-master"], ports["loadgen-metrics"]
        locustfile = str(options.repo / "locustfiles" / "chat.py")
        first = options.variants[0]
        parts.append(
            Part(
                "locust-master",
                "locust-master",
                (
                    python,
                    "-m",
                    "locust",
                    "-f",
                    locustfile,
                    "--master",
                    "--master-bind-host",
                    HOST,
                    "--master-bind-port",
                    str(master),
                    "--web-host",
                    HOST,
                    "--web-port",
                    str(web),
                    "--host",
                    f"http://{HOST}:{ports[f'sim:{first}']}",
                    "--variant",
                    first,
                    "--metrics-address",
                    f"{HOST}:{metrics}",
                ),
                logs / "locust-master.log",
                url=f"http://{HOST}:{web}",
                health_url=f"http://{HOST}:{web}/",
                ports={"web": web, "master": master, "metrics": metrics},
            )
        )
        for i in range(1, options.workers + 1):
            parts.append(
                Part(
                    f"locust-worker-{i}",
                    "locust-worker",
                    (
                        python,
                        "-m",
                        "locust",
                        "-f",
                        locustfile,
                        "--worker",
                        "--master-host",
                        HOST,
                        "--master-port",
                        str(master),
                    ),
                    logs / f"locust-worker-{i}.log",
                )
            )
    return Plan(options, tuple(parts))
