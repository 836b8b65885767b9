"""``webdb SUBCOMMAND …``: git-style entry point.  Errors print one line naming the input."""

from __future__ import annotations

import argparse
import importlib
import sys

from webdb.errors import WebDBError

# Subcommand name → module in webdb.cli (loaded only when used, so `webdb read` does not
# import the fetcher).
COMMANDS = {
    "create": "create",
    "read": "read",
    "check": "check",
    "inject": "inject",
    "generate": "generate",
    "fetch": "fetch",
    "update": "update",
    "crawl": "crawl",
    "demo": "demo",
    "rebalance": "rebalance",
    "recover": "recover",
    "rank": "rank",
    "dedup": "dedup",
    "prefixes": "prefixes",
    "filters": "filters",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="webdb", description="A crawl database and crawl loop.")
    ap.add_argument("--version", action="version", version=f"webdb {__import__('webdb').__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=f"see `webdb {name} --help`")
            continue
        try:
            m = importlib.import_module(f"webdb.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"webdb.cli.{mod}":
                raise
            continue
        m.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = next((a for a in argv if not a.startswith("-")), None)
    ap = build_parser(cmd if cmd in COMMANDS else None)
    args = ap.parse_args(argv)
    if not getattr(args, "run", None):
        ap.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except WebDBError as e:
        print(f"webdb {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"webdb {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
