"""What the temporary registry costs: the start-up sweep of every `studio` command, and one
registered temporary (a record line, fsync'd, then the O_EXCL create).

    .venv/bin/python tests/benchmarks/bench_temps.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def best_of(fn, n=200) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times), statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        os.environ["STUDIO_HOME"] = home
        from studio.core.store import temps

        print(
            f"sweep, no records folder:     best {best_of(temps.sweep_dead_temps)[0]:.3f} ms, "
            f"median {best_of(temps.sweep_dead_temps)[1]:.3f} ms"
        )
        (Path(home) / "tmp").mkdir()
        print(
            f"sweep, empty records folder:  best/median {'/'.join(f'{v:.3f}' for v in best_of(temps.sweep_dead_temps))} ms"
        )
        out = Path(home) / "out"
        out.mkdir()
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from studio.core.store import temps; import sys, time; "
                f"temps.temp_file({str(out)!r}, '.x.', '.part.mp4'); print('ok', flush=True); "
                "time.sleep(60)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        child.stdout.readline()
        print(
            f"sweep, one live record:       best/median {'/'.join(f'{v:.3f}' for v in best_of(temps.sweep_dead_temps))} ms"
        )
        child.kill()
        child.wait()
        t0 = time.perf_counter()
        removed = temps.sweep_dead_temps()
        print(f"sweep, one dead record:       {(time.perf_counter() - t0) * 1e3:.3f} ms ({len(removed)} removed)")

        def one():
            p = temps.temp_file(out, ".b.", ".part.mp4")
            p.unlink()
            temps.release_temp(p)

        print(
            f"one registered temporary:     best/median {'/'.join(f'{v:.3f}' for v in best_of(one, 100))} ms "
            f"(record line + fsync, create, unlink, release) on {out}"
        )


if __name__ == "__main__":
    main()
