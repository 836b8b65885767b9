"""``webdb SUBCOMMAND …``: git-style entry point.  Errors print one line naming the input."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from webdb.errors import WebDBError

# Subcommand name → module in webdb.cli (loaded only when used, so `webdb read` does not
# import the fetcher).
COMMANDS = {
    "create": "create",
    "read": "read",
    "export": "export",
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
    "unlock": "unlock",
    "segment": "segment",
    "import": "import_",
    "compact": "compact",
    "serve": "serve",
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


def one_line(message: str) -> str:
    """An error message on one line (a parser's message may span several)."""
    return " | ".join(line.strip() for line in message.splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    i = next((n for n, a in enumerate(argv) if not a.startswith("-")), None)
    cmd = argv[i] if i is not None else None
    ap = build_parser(cmd if cmd in COMMANDS else None)
    if i is None or cmd not in COMMANDS:
        args = ap.parse_args(argv)  # --help, --version, or the usage error naming the command
    else:
        ap.parse_args(argv[:i])  # options before the command: --help / --version
        sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
        # Options may stand anywhere among the inputs: `webdb update DB -q SEG`.
        args = sub.choices[cmd].parse_intermixed_args(argv[i + 1 :])
        args.command = cmd
    if not getattr(args, "run", None):
        ap.print_help()
        return 2
    try:
        rc = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return rc
    except BrokenPipeError:
        # The reader went away (`webdb read … | head`): what it wanted was written.  Point
        # stdout at /dev/null so the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except WebDBError as e:
        print(f"webdb {args.command}: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.filename is None:  # the system failed us (network, resources): not bad input
            print(f"webdb {args.command}: error: {type(e).__name__}: {one_line(str(e))}", file=sys.stderr)
            return 1
        # A path the command could not use (missing, a file where a folder is needed, under
        # a file, on /proc): bad input like any other, named.
        print(f"webdb {args.command}: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"webdb {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
