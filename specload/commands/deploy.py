"""``specload deploy systemd``: a vLLM unit rewritten for a service variant.

    specload deploy systemd --from /etc/systemd/system/vllm.service --variant ngram
    specload deploy systemd --from vllm.service --variant eagle3 --draft-model /models/eagle3
    specload deploy systemd --from vllm.service --variant suffix --spec '{"method":"suffix"}'

Writes ``<stem>-<variant>.service`` beside the source (or ``--out``) and prints
the diff. Everything but the speculative flags of ``ExecStart=`` is kept.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from specload.deploy import speculative
from specload.deploy.execline import ExecLineError
from specload.deploy.k8s import render, render_overlay
from specload.deploy.systemd import rewrite_unit, unified_diff, variant_unit_path
from specload.errors import UsageError
from specload.results.writer import prepare_out_dir
from specload.stack.plan import find_repo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="deploy_target", metavar="TARGET")
    sub.required = True
    unit = sub.add_parser(
        "systemd",
        help="write a variant's unit from an existing vLLM unit",
        description="Write a variant's systemd unit from an existing vLLM unit, "
        "changing only the speculative flags of ExecStart=, and print the diff.",
    )
    unit.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="UNIT",
        help="the existing vLLM .service unit",
    )
    unit.add_argument(
        "--variant",
        required=True,
        metavar="NAME",
        help="baseline (no speculation), ngram, eagle3, or any name with --spec",
    )
    unit.add_argument(
        "--spec", metavar="JSON", help="vLLM --speculative-config JSON (or @FILE) for the variant"
    )
    unit.add_argument(
        "-k",
        "--num-speculative-tokens",
        type=int,
        metavar="K",
        help="tokens proposed per step (ngram: 3, eagle3: 3)",
    )
    unit.add_argument("--prompt-lookup-min", type=int, metavar="N", help="ngram: 2")
    unit.add_argument("--prompt-lookup-max", type=int, metavar="N", help="ngram: 4")
    unit.add_argument("--draft-model", metavar="PATH", help="eagle3: the draft head (required)")
    unit.add_argument(
        "--draft-tp",
        type=int,
        metavar="N",
        help="eagle3: draft tensor-parallel size (vLLM's default if omitted)",
    )
    unit.add_argument(
        "--per-request-spec-decode-metrics",
        choices=speculative.PER_REQUEST_LEVELS,
        metavar="LEVEL",
        help="vLLM >= 0.32: per-request speculative-decoding counts on every response "
        "(none, summary, detailed: what specload splits by channel); default: the unit's own; "
        "never on the baseline (vLLM refuses it without speculation)",
    )
    unit.add_argument(
        "--out",
        metavar="PATH",
        help="where to write (default: <stem>-<variant>.service beside --from)",
    )
    unit.add_argument("--force", action="store_true", help="overwrite an existing --out")
    unit.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    k8s = sub.add_parser(
        "k8s",
        help="render the Kubernetes kustomize base with the repo's rules and boards",
        description="Copy deploy/k8s/base to --out and add prometheusrule.yaml (the repo's "
        "rules and alerts) and dashboards/ (grafana/dashboards); then kubectl apply -k OUT.",
    )
    k8s.add_argument("--out", required=True, metavar="DIR", help="folder to write")
    k8s.add_argument("--image", metavar="IMAGE[:TAG]", help="the specload image to run")
    k8s.add_argument("--namespace", metavar="NS", help="namespace for every resource")
    k8s.add_argument("--repo", metavar="DIR", help="the specload source tree (default: found)")
    k8s.add_argument(
        "--overlay",
        metavar="NAME",
        help="also an overlay of deploy/k8s/overlays (e.g. workers-50): the base goes to "
        "OUT/base, the overlay to OUT/overlays/NAME, which you apply",
    )


def _spec_text(value: str) -> str:
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--spec: cannot read {str(path)!r}: {exc.strerror}") from None


def build_variant(args: argparse.Namespace) -> speculative.Variant:
    variant = _build_variant(args)
    level = getattr(args, "per_request_spec_decode_metrics", None)
    if level is None:
        return variant
    if variant.speculative_config is None and level != "none":
        raise UsageError(
            "--per-request-spec-decode-metrics: not for --variant baseline "
            "(vLLM refuses it without speculation)"
        )
    return replace(variant, per_request_metrics=level)


def _build_variant(args: argparse.Namespace) -> speculative.Variant:
    name = speculative.check_variant_name(args.variant)
    ngram_opts = {
        "--prompt-lookup-min": args.prompt_lookup_min,
        "--prompt-lookup-max": args.prompt_lookup_max,
    }
    eagle_opts = {"--draft-model": args.draft_model, "--draft-tp": args.draft_tp}
    if args.spec is not None:
        k_opt = {"--num-speculative-tokens": args.num_speculative_tokens}
        extra = {**ngram_opts, **eagle_opts, **k_opt}
        given = [flag for flag, value in extra.items() if value is not None]
        if given:
            raise UsageError(f"{given[0]}: not allowed with --spec (put it in the JSON)")
        if name == "baseline":
            raise UsageError("--spec: the baseline variant has no speculative config")
        return speculative.from_json(name, _spec_text(args.spec))
    if name == "baseline":
        opts = {**ngram_opts, **eagle_opts, "--num-speculative-tokens": args.num_speculative_tokens}
        given = [flag for flag, value in opts.items() if value is not None]
        if given:
            raise UsageError(f"{given[0]}: not allowed for --variant baseline")
        return speculative.baseline()
    k = args.num_speculative_tokens if args.num_speculative_tokens is not None else 3
    if name == "ngram":
        given = [flag for flag, value in eagle_opts.items() if value is not None]
        if given:
            raise UsageError(f"{given[0]}: not allowed for --variant ngram")
        return speculative.ngram(
            k,
            args.prompt_lookup_min if args.prompt_lookup_min is not None else 2,
            args.prompt_lookup_max if args.prompt_lookup_max is not None else 4,
        )
    if name == "eagle3":
        given = [flag for flag, value in ngram_opts.items() if value is not None]
        if given:
            raise UsageError(f"{given[0]}: not allowed for --variant eagle3")
        if args.draft_model is None:
            raise UsageError("--draft-model: required for --variant eagle3")
        return speculative.eagle3(args.draft_model, k, args.draft_tp)
    raise UsageError(
        f"--variant: {name!r} is not one of baseline, ngram, eagle3; "
        "give its config with --spec JSON"
    )


def run(args: argparse.Namespace) -> int:
    if args.deploy_target == "k8s":
        return _run_k8s(args)
    return _run_systemd(args)


def _run_k8s(args: argparse.Namespace) -> int:
    repo = find_repo(args.repo)
    out = prepare_out_dir(args.out)  # one line if it cannot be created or written
    apply = out
    try:
        if args.overlay:
            apply, warnings = render_overlay(
                repo, out, args.overlay, image=args.image, namespace=args.namespace
            )
        else:
            warnings = render(repo, out, image=args.image, namespace=args.namespace)
    except OSError as exc:
        raise UsageError(
            f"--out {str(out)!r}: cannot write {exc.filename or 'in it'} ({exc.strerror or exc})"
        ) from None
    for warning in warnings:
        print(f"specload: warning: {warning}", file=sys.stderr)
    print(f"wrote {out}; apply with: kubectl apply -k {apply}", file=sys.stderr)
    return 0


def _run_systemd(args: argparse.Namespace) -> int:
    variant = build_variant(args)
    source = Path(args.source)
    try:
        old = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--from: cannot read {args.source!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--from: {args.source!r} is not UTF-8 text") from None
    target = Path(args.out) if args.out else variant_unit_path(source, variant.name)
    try:
        rewrite = rewrite_unit(old, variant, where=args.source)
    except ExecLineError as exc:
        raise UsageError(f"--draft-model/--spec: {exc}") from None
    for warning in rewrite.warnings:
        print(f"specload: warning: {args.source}: {warning}", file=sys.stderr)
    sys.stdout.write(
        unified_diff(old, rewrite.text, str(source), str(target))
        or f"# {target}: no change from {source}\n"
    )
    if args.dry_run:
        return 0
    if target.resolve() == source.resolve():
        raise UsageError(f"--out: {str(target)!r} is the source unit; write elsewhere")
    if target.exists() and not args.force and target.read_text(encoding="utf-8") != rewrite.text:
        raise UsageError(f"--out: {str(target)!r} exists and differs; use --force to overwrite")
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(rewrite.text, encoding="utf-8")
        os.chmod(tmp, source.stat().st_mode & 0o777)
        os.replace(tmp, target)
    except OSError as exc:
        raise UsageError(f"--out: cannot write {str(target)!r}: {exc.strerror}") from None
    print(f"wrote {target}", file=sys.stderr)
    return 0
