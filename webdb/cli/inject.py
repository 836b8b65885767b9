"""``webdb inject DB FILE...``: add seed URLs (if not present) with an injected score.

Seed file: one URL per line, optionally followed by tab-separated name=value metadata
(score=X, fetch_interval=SECONDS, or any name=value kept in page.meta; Nutch's nutch.score
and nutch.fetchInterval are accepted).  '#' lines and blank lines are skipped.  The db is
created (with --sections) if it does not exist.

With ``--hosts hosts.ini`` DB is the db name of a rack (made by ``webdb create --hosts``): the
seed files (and the filter, www and focus rule files) are copied from here to the first host
with sections, and one rack batch injects them there; every seed reaches the section that
owns its URL.
"""

from __future__ import annotations

import argparse
import os

import webdb
from webdb.cli.common import add_json, add_lock_wait, add_quiet, emit
from webdb.cli.crawlopts import existing_files, positive_int
from webdb.errors import NotADatabase


def add_parser(sub) -> None:
    p = sub.add_parser(
        "inject", help="add seed URLs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("db", help="database directory; with --hosts, the db name")
    p.add_argument("--hosts", metavar="HOSTS_INI", help="inject into the rack of this hosts.ini")
    p.add_argument("files", nargs="+", metavar="FILE", help="seed files")
    p.add_argument("--score", type=float, default=1.0, help="score of an injected page (default 1.0)")
    p.add_argument("--filter", action="append", metavar="FILE", dest="filters", help="URL filter file, repeatable")
    p.add_argument("--www-rules", metavar="FILE", help="www/non-www rules applied to the seeds")
    p.add_argument("--focus-rules", metavar="FILE", help="useful-URL rules: fitting seeds get meta fit=1")
    p.add_argument("--fit-score", type=float, help="score of a fitting seed without its own score")
    p.add_argument("--skip-bad", action="store_true", help="count and skip malformed lines instead of failing")
    p.add_argument("--sections", type=positive_int, default=1, help="sections of a db created here (default 1)")
    add_lock_wait(p)
    add_quiet(p)
    add_json(p)
    p.set_defaults(run=run)


def open_or_create(path: str, sections: int):
    """The db at ``path``; created (empty) if the path does not exist or is an empty directory."""
    try:
        return webdb.open(path), False
    except NotADatabase:
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise
        return webdb.create(path, sections=sections), True


def remove_created(path: str, keep_dir: bool) -> None:
    """Remove the db this command created at ``path``; ``keep_dir``: the empty directory it
    was created in stays."""
    import shutil

    if not keep_dir:
        shutil.rmtree(path)
        return
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.remove(full)


def run(args) -> int:
    from fetchlist.filters import UrlFilter
    from fetchlist.focus import FocusRules
    from fetchlist.inject import inject
    from fetchlist.normalize import WwwRules

    existing_files(args.files, "seed file")
    if args.hosts:
        return run_rack(args)
    opts = {
        "score": args.score,
        "url_filter": UrlFilter.from_files(args.filters) if args.filters else None,
        "www": WwwRules.from_file(args.www_rules) if args.www_rules else None,
        "skip_bad": args.skip_bad,
        "focus": FocusRules.from_file(args.focus_rules) if args.focus_rules else None,
        "fit_score": args.fit_score,
    }
    existed = os.path.isdir(args.db)
    db, created = open_or_create(args.db, args.sections)
    from webdb.core.lockwait import wait_for_lock

    try:
        c = wait_for_lock(lambda: inject(db, args.files, **opts), args.lock_wait, "inject")
    except BaseException:
        if created:  # a failed inject leaves no empty db behind: the path is as it was
            remove_created(db.path, keep_dir=existed)
        raise
    c["created"] = created
    text = (
        (f"created {db.path}\n" if created else "")
        + f"injected {c['new']:,} new pages ({c['urls']:,} URLs read, {c['urls'] - c['new']:,} already present, "
        f"{c['filtered']:,} filtered, {c['bad']:,} bad lines skipped); db has {c['pages']:,} pages"
    )
    for line in c["bad_lines"]:
        text += f"\n  skipped {line}"
    emit(args, c, text)
    return 0


def run_rack(args) -> int:
    """Inject into a rack: ship the files to one location, run one rack batch there."""
    import hashlib

    from webdb.cli.update import rack_lock_held
    from webdb.core.lockwait import wait_for_lock
    from webdb.ndfs import open_transport
    from webdb.writer.rack import Rack, update

    for f in [*(args.filters or []), *filter(None, [args.www_rules, args.focus_rules])]:
        existing_files([f], "rules file")
    rack = Rack.from_file(args.hosts, args.db)
    place = next(p for p in rack.places.values() if p.sections)
    base = rack.path(place.label)
    shipped: list[str] = []

    def ship(path: str) -> str:
        with open(path, "rb") as f:
            tag = hashlib.sha256(f.read()).hexdigest()[:12]
        name = f"{rack.db}/inject/{tag}-{os.path.basename(path)}"
        t.put(path, name)
        shipped.append(name)
        return os.path.join(base, "inject", name.rsplit("/", 1)[1])

    with open_transport(place.location) as t:
        seeds = [ship(f) for f in args.files]
        options = {
            "score": args.score,
            "url_filters": [ship(f) for f in args.filters or []],
            "www_rules": ship(args.www_rules) if args.www_rules else None,
            "focus_rules": ship(args.focus_rules) if args.focus_rules else None,
            "fit_score": args.fit_score,
            "skip_bad": args.skip_bad,
        }
        inputs = {j: {"paths": seeds if j == place.sections[0] else []} for j in range(rack.k)}
        try:
            res = wait_for_lock(
                lambda: update(rack, inputs, input_fn="fetchlist.inject:inject_input", options=options),
                args.lock_wait,
                "inject",
                rack_lock_held,
            )
        finally:
            for name in shipped:
                t.delete(name)
    distributed = (res.manifest.distributed if res.manifest else None) or {}
    counts = dict((distributed.get("input") or {}).get(str(place.sections[0])) or {})
    data = {"db": rack.db, "generation": res.generation, "host": place.label, **counts}
    emit(args, data, f"injected {counts.get('urls', '?')} seed URLs through {place.label}; {res.summary()}")
    return 0
