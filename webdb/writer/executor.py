"""The engine's local executor: where the stage jobs of one stage run when every section is on
this machine (``Writer.close``).

``LocalExecutor(workers)`` keeps ``workers`` long-lived worker processes (``serve``) for one
batch: started once (not once per stage), each with its own memory, and without importing the
caller's ``__main__``.  Jobs go as file paths on stdin; results come back as JSON lines on
stdout.  A dead worker fails the batch with its stage and section.  With one worker, or one
job, a stage runs in this process (the small-batch fast path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from webdb.errors import WebDBError
from webdb.writer.cascade import StageJob, run_stage

__all__ = ["LocalExecutor", "serve"]

# Workers start here, so that they import this process's webdb whatever the caller's working
# directory holds (python puts the working directory first on a child's sys.path).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LocalExecutor:
    """Runs a stage's jobs (one per section) in parallel worker processes, or here."""

    def __init__(self, workers: int, tmp: str):
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        if workers > 1:
            self.procs = [
                subprocess.Popen(
                    [sys.executable, "-c", "import sys; from webdb.writer.executor import serve; sys.exit(serve())"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=_ROOT,
                )
                for _ in range(workers)
            ]

    def __call__(self, jobs: list[StageJob]) -> list[dict]:
        """Run one stage's jobs; results in job order."""
        if not self.procs or len(jobs) <= 1:
            return [run_stage(job) for job in jobs]
        return self._run(jobs)

    def _run(self, jobs: list[StageJob]) -> list[dict]:
        os.makedirs(self.tmp, exist_ok=True)
        results: list[dict | None] = [None] * len(jobs)
        pending = list(enumerate(jobs))
        busy: dict[int, tuple[int, str]] = {}  # worker -> (job index, job file)
        while pending or busy:
            for w, p in enumerate(self.procs):
                if w not in busy and pending:
                    i, job = pending.pop(0)
                    path = os.path.join(self.tmp, f"job-st{job.stage}-{job.section:04d}.json")
                    with open(path, "w") as f:
                        json.dump(job.to_json(), f)
                    p.stdin.write(path.encode() + b"\n")
                    p.stdin.flush()
                    busy[w] = (i, path)
            # Results in submission order of each worker; wait for the oldest busy one.
            w = min(busy, key=lambda x: busy[x][0])
            i, path = busy.pop(w)
            line = self.procs[w].stdout.readline()
            os.unlink(path)
            if not line:
                job = jobs[i]
                self.procs[w].wait()
                err = self.procs[w].stderr.read().decode("utf-8", "replace").strip().splitlines()[-1:]
                why = err[0] if err else f"exit status {self.procs[w].returncode}"
                raise WebDBError(f"stage {job.stage} of section {job.section} failed: {why}")
            res = json.loads(line)
            if "error" in res:
                job = jobs[i]
                raise WebDBError(f"stage {job.stage} of section {job.section} failed: {res['error']}")
            results[i] = res
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.stdin.close()
                except BrokenPipeError:
                    pass  # the worker is gone already: wait() below reaps it
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for f in (p.stdout, p.stderr):
                f.close()

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        self.close()


def serve() -> int:
    """A worker: run the stage job named by each stdin line, answer with its result (JSON line)."""
    for line in sys.stdin:
        with open(line.strip()) as f:
            job = StageJob.from_json(json.load(f))
        try:
            res = run_stage(job)
        except WebDBError as e:
            res = {"error": str(e)}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()
    return 0
