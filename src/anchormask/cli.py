"""The `anchormask` command: checkpoint hashes and audit manifests of a results tree.

Why: pinning config.yaml's base.sha256 and checking that a rerun touched only what it
should are both questions about bytes; these subcommands answer them without Snakemake.

    anchormask hash DIR                                manifest hash of a checkpoint directory
    anchormask audit manifest [--results R] [-o FILE]  JSON manifest of every output under R
    anchormask audit compare OLD NEW                   changed / unchanged / added / removed
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from anchormask import audit
from anchormask.checksum import directory_sha256


def _hash(args: argparse.Namespace) -> int:
    print(directory_sha256(args.directory))
    return 0


def _manifest(args: argparse.Namespace) -> int:
    text = audit.write_manifest(audit.build_manifest(args.results, args.workdir), args.output)
    if args.output is None:
        sys.stdout.write(text)
    return 0


def _compare(args: argparse.Namespace) -> int:
    result = audit.compare_manifests(audit.read_manifest(args.old), audit.read_manifest(args.new))
    sys.stdout.write(audit.format_comparison(result))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anchormask", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("hash", help="print the manifest SHA-256 of a directory (config base.sha256)")
    p.add_argument("directory")
    p.set_defaults(func=_hash)
    a = sub.add_parser("audit", help="manifests of results/ and their comparison")
    asub = a.add_subparsers(dest="audit_command", required=True)
    m = asub.add_parser("manifest", help="write a JSON manifest of every output under --results")
    m.add_argument("--results", default="results", help="results directory, relative to --workdir")
    m.add_argument("--workdir", default=".", help="the Snakemake working directory (holds .snakemake/)")
    m.add_argument("-o", "--output", default=None, help="write here instead of stdout")
    m.set_defaults(func=_manifest)
    c = asub.add_parser("compare", help="compare two manifests; always exits 0")
    c.add_argument("old")
    c.add_argument("new")
    c.set_defaults(func=_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
