"""`python -m trainer cache list|prune --root URI`: inspect and trim the conversion cache.

trainer/cli.py adds these sub-commands with `add_cache_parser(sub)` and dispatches "cache" to
`cmd_cache(args)`; `main()` here runs them standalone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

from trainer.storage import StorageError

DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(text: str) -> float:
    match = DURATION_RE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 30m, 12h or 7d")
    return float(match.group(1)) * UNIT_S[match.group(2)]


def add_cache_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    cache = sub.add_parser("cache", help="list or prune the conversion cache")
    actions = cache.add_subparsers(dest="cache_command", required=True)
    for name, help_text in (("list", "list complete entries, newest first"), ("prune", "remove entries")):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("--root", required=True, help="cache root: gs://bucket/prefix/_cache/maxtext or a local dir")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    prune = actions.choices["prune"]
    prune.add_argument("--older-than", type=parse_duration_s, metavar="DURATION", help="e.g. 30d: entries created before")
    prune.add_argument("--keep-last", type=int, metavar="N", help="keep the N newest entries, remove the rest")
    prune.add_argument("--key", help="remove one entry by name (or its digest)")
    prune.add_argument(
        "--orphan-grace",
        type=parse_duration_s,
        default=None,
        metavar="DURATION",
        help="age after which unpublished converter output is removed (default 6h)",
    )
    prune.add_argument("--dry-run", action="store_true", help="print what would be removed; remove nothing")
    return cache


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def cmd_cache(args: argparse.Namespace) -> int:
    from trainer.contract import ExitCode
    from trainer.conversion_cache import ORPHAN_GRACE_S, ConversionCache

    try:
        cache = ConversionCache(args.root)
        if args.cache_command == "list":
            entries = cache.list_entries()
            if args.json:
                print(json.dumps([{**e.__dict__, "checkpoint_uri": e.checkpoint_uri} for e in entries], indent=2))
            else:
                for e in entries:
                    created = time.strftime("%Y-%m-%d %H:%M", time.gmtime(e.created_s))
                    print(
                        f"{e.name}  {created}Z  {_human(e.size_bytes):>10}  {e.key.get('dtype')}  "
                        f"maxtext {e.key.get('maxtext_version')}  {e.key.get('source')}  {e.checkpoint_uri}"
                    )
                print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} under {cache.root}")
            return 0
        if args.older_than is None and args.keep_last is None and args.key is None and args.orphan_grace is None:
            print("prune needs --older-than, --keep-last, --key or --orphan-grace", file=sys.stderr)
            return 2
        if args.keep_last is not None and args.keep_last < 0:
            print("--keep-last must be >= 0", file=sys.stderr)
            return 2
        removed = cache.prune(
            older_than_s=args.older_than,
            keep_last=args.keep_last,
            key=args.key,
            orphan_grace_s=ORPHAN_GRACE_S if args.orphan_grace is None else args.orphan_grace,
            dry_run=args.dry_run,
        )
        if args.json:
            print(json.dumps({"removed": removed, "dry_run": args.dry_run}))
        else:
            verb = "would remove" if args.dry_run else "removed"
            for uri in removed:
                print(f"{verb} {uri}")
            print(f"{verb} {len(removed)} item(s) under {cache.root}")
        return 0
    except StorageError as e:
        print(f"storage problem: {e}", file=sys.stderr)
        return int(ExitCode.STORAGE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.conversion_cache_cli")
    add_cache_parser(parser.add_subparsers(dest="command", required=True))
    return cmd_cache(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
