#!/usr/bin/env python3
"""CPU seconds of each cascade stage of one section, replayed in this process from a captured
round, so two versions of the code can be compared stage by stage (and profiled) on the same
inputs, on a busy machine too (CPU time, one process, no barrier waits).

    # 1. a db (e.g. driver.py --keep, or bench_round.py) and a capture of one round on a copy of it
    python bench/bench_stages.py capture --db /tmp/w/db --data bench/data/n1000000 --work /tmp/st
    # 2. replay stages 3 and 4 of section 0 with the code of a snapshot, twice each
    python bench/bench_stages.py replay --work /tmp/st --src /tmp/snap --stages 3,4 --repeat 2

``capture`` copies the db to WORK/db and runs the round there (`webdb update` on a local rack,
k section processes, as bench/peer_webdb.py), with a hook (a ``sitecustomize`` on the section
processes' path, bench-only) that saves every stage job — its edit files and its input tables
— under WORK/jobs.  ``replay`` runs each saved job with the code in ``--src`` (sync off, the
new table and emitted edits removed afterwards) and prints one JSON line per run: CPU and wall
seconds and a digest of every file it wrote — tables, delta runs, the due index's run, edit
files (equal digests: equal output).
Stage 0 is step 0: the hook also saves each section's ``apply_input`` arguments, and the
replay applies the section's share of round.tsv (with ``--src``'s webdb and bench/roundtsv.py)
and routes it into a scratch outbox; its digest covers every edit file, name and bytes.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HOOK = """
import os
if os.environ.get("BENCH_STAGES_SAVE"):
    import json, shutil
    import webdb.writer.cascade as cascade
    import webdb.writer.executor as executor
    _run = cascade.run_stage

    def run_stage(stage_job):
        job = stage_job.to_json()
        d = os.path.join(os.environ["BENCH_STAGES_SAVE"], "st%d-s%d" % (job["stage"], job["section"]))
        os.makedirs(d, exist_ok=True)
        ins = []
        for i, p in enumerate(job["inputs"]):
            ins.append(os.path.join(d, "in%d.edits" % i))
            shutil.copy(p, ins[-1])
        tabs = {}
        for t, e in job["tables"].items():
            # The base and (levels) its delta runs, copied under the names the job gives them.
            runs = [os.path.join(d, "%s.run%d" % (t, i)) for i in range(len(e["runs"]))]
            tabs[t] = dict(e, base=os.path.join(d, t), runs=runs)
            for a, b in zip([e["base"]] + e["runs"], [tabs[t]["base"]] + runs):
                shutil.copy(a, b)
        with open(os.path.join(d, "job.json"), "w") as f:
            json.dump(dict(job, inputs=ins, tables=tabs), f)
        return _run(stage_job)

    cascade.run_stage = executor.run_stage = run_stage

    import webdb.writer.section as section
    _apply = section.apply_input

    def apply_input(spec, job0, secs, tmp, breakpoints):
        saved = spec.to_json() if hasattr(spec, "to_json") else spec  # a tree before SectionSpec: a dict
        d = os.path.join(os.environ["BENCH_STAGES_SAVE"], "st0-s%d" % saved["section"])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "job.json"), "w") as f:
            json.dump({"spec": saved, "job0": job0.to_json(), "sections": secs.to_json()}, f)
        return _apply(spec, job0, secs, tmp, breakpoints)

    section.apply_input = apply_input
"""


def capture(args: argparse.Namespace) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.dirname(here)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(os.path.join(args.work, "hook"))
    with open(os.path.join(args.work, "hook", "sitecustomize.py"), "w") as f:
        f.write(HOOK)
    subprocess.run(["cp", "-r", args.db, os.path.join(args.work, "db")], check=True)
    env = dict(
        os.environ,
        BENCH_STAGES_SAVE=os.path.join(args.work, "jobs"),
        PYTHONPATH=os.pathsep.join([os.path.join(args.work, "hook"), here, src]),
    )
    code = (
        "import sys; from roundtsv import INPUT; from webdb.writer.rack import Rack, update; "
        "db, tsv, k = sys.argv[1], sys.argv[2], int(sys.argv[3]); "
        "update(Rack.local(db), {j: {'paths': [tsv], 'options': {'share': [j, k]}} for j in range(k)}, input_fn=INPUT)"
    )
    t0 = time.monotonic()
    db = os.path.join(args.work, "db")
    subprocess.run(
        [sys.executable, "-c", code, db, os.path.join(args.data, "round.tsv"), str(args.sections)], env=env, check=True
    )
    print(
        json.dumps(
            {
                "captured": sorted(os.listdir(os.path.join(args.work, "jobs"))),
                "round_s": round(time.monotonic() - t0, 2),
            }
        )
    )


def replay(args: argparse.Namespace) -> None:
    sys.path[:0] = [args.src, os.path.join(args.src, "bench")]  # its webdb and its roundtsv
    from webdb.core.sections import section_path
    from webdb.writer import cascade

    tmp = os.path.join(args.work, f"replay-{os.getpid()}")
    for stage in [int(s) for s in args.stages.split(",")]:
        if stage == 0:
            replay_step0(args, tmp)
            continue
        with open(os.path.join(args.work, "jobs", f"st{stage}-s{args.section}", "job.json")) as f:
            job = json.load(f)
        for r in range(args.repeat):
            os.makedirs(tmp, exist_ok=True)
            j = dict(job, gen=900_000 + r, batch=f"replay-{os.getpid()}-{r}", tmp=tmp, outbox=os.path.join(tmp, "out"))
            j["settings"] = dict(j["settings"], sync=False)
            c0, w0 = time.process_time(), time.perf_counter()
            cascade.run_stage(_typed_job(cascade, j))
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            # Every file of the replay's generation (the new table or delta run, stage 1's due
            # run, a merged run or new base) and every edit file it routed: digested, then gone,
            # so the next replay starts from the captured state.
            mine = sorted(glob.glob(os.path.join(section_path(j["db"], args.section), f"{j['gen']:08d}-*")))
            h = hashlib.sha1()
            for p in mine + sorted(glob.glob(os.path.join(j["outbox"], "*", "edits", j["batch"], "*", "*"))):
                with open(p, "rb") as f:
                    h.update(f.read())
            for p in mine:
                os.unlink(p)
            shutil.rmtree(tmp)
            print(
                json.dumps(
                    {
                        "src": args.src,
                        "stage": stage,
                        "section": args.section,
                        "cpu_s": round(cpu, 2),
                        "wall_s": round(wall, 2),
                        "digest": h.hexdigest()[:12],
                    }
                ),
                flush=True,
            )


def _typed_job(cascade, job: dict):
    """A saved job as the replayed tree's ``run_stage`` takes it (trees before ``StageJob``
    took the JSON dict itself)."""
    return cascade.StageJob.from_json(job) if hasattr(cascade, "StageJob") else job


def _typed_spec(spec: dict):
    """A saved section spec as the replayed tree's ``apply_input`` takes it (trees before
    ``webdb.writer.spec`` took the JSON dict itself)."""
    try:
        from webdb.writer.spec import SectionSpec
    except ImportError:
        return spec
    return SectionSpec.from_json(spec)


def replay_step0(args: argparse.Namespace, tmp: str) -> None:
    """Step 0 of a section: its share of round.tsv through ``apply_input`` (parse, EditLog,
    sort, route into the outbox); the digest covers every edit file routed (name and bytes)."""
    from webdb.core.sections import Sections
    from webdb.writer import cascade
    from webdb.writer.section import apply_input

    with open(os.path.join(args.work, "jobs", f"st0-s{args.section}", "job.json")) as f:
        saved = json.load(f)
    for r in range(args.repeat):
        os.makedirs(tmp, exist_ok=True)
        batch = f"replay-{os.getpid()}-{r}"
        out = os.path.join(tmp, "out")
        job0 = dict(saved["job0"], gen=900_000 + r, batch=batch, tmp=tmp, outbox=out)
        job0["settings"] = dict(job0["settings"], sync=False)
        c0, w0 = time.process_time(), time.perf_counter()
        _, api, info, _ = apply_input(
            _typed_spec(saved["spec"]), _typed_job(cascade, job0), Sections.from_json(saved["sections"]), tmp, None
        )
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        h = hashlib.sha1()
        files = sorted(glob.glob(os.path.join(out, "*", "edits", batch, "*", "*")))
        for p in files:
            h.update(os.path.relpath(p, out).replace(batch, "B").encode())
            with open(p, "rb") as f:
                h.update(f.read())
        shutil.rmtree(tmp)
        print(
            json.dumps(
                {
                    "src": args.src,
                    "stage": 0,
                    "section": args.section,
                    "cpu_s": round(cpu, 2),
                    "wall_s": round(wall, 2),
                    "files": len(files),
                    "api": api,
                    "digest": h.hexdigest()[:12],
                }
            ),
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--db", required=True, help="db to copy (not changed)")
    c.add_argument("--data", required=True, help="workload directory (round.tsv)")
    c.add_argument("--work", required=True, help="scratch directory (wiped)")
    c.add_argument("--sections", type=int, default=2, help="the db's k")
    r = sub.add_parser("replay")
    r.add_argument("--work", required=True)
    r.add_argument("--src", required=True, help="source tree whose webdb runs the stages")
    r.add_argument("--stages", default="1,2,3,4,5", help="0 is step 0: the section's input, routed")
    r.add_argument("--section", type=int, default=0)
    r.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    (capture if args.cmd == "capture" else replay)(args)


if __name__ == "__main__":
    main()
