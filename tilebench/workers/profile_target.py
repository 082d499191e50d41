"""The process Nsight Compute profiles: `python -m tilebench.workers.profile_target JOB_FILE`.

It runs the Run tab's job (a pickled BenchJob that `workers/profile.py` wrote) once, with a short timing,
so that the kernel launches a few times; ncu picks the launch it profiles. Its exit code says whether
the job ran.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from pathlib import Path

from tilebench.measure.job import run_job


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tilebench.workers.profile_target JOB_FILE", file=sys.stderr)
        return 2
    job = pickle.loads(Path(argv[1]).read_bytes())  # written by workers/profile.py, for this process only
    job = dataclasses.replace(job, warmup_ms=0.0, rep_ms=1.0, time_ref=False)
    result = run_job(job)
    print(f"tilebench profile target: {result.status} {result.message}".rstrip(), flush=True)
    return 0 if result.status in ("ok", "mismatch") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
