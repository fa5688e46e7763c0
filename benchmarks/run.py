"""Run the structexec benchmarks and print a results table.

    python benchmarks/run.py [--quick] [--only PATTERN] [--reps N] [--json PATH] [--check]

Every ``benchmarks/bench_*.py`` module is imported; its ``@row`` functions (see
``_harness.py``) are run ``--reps`` times and the median of each side is reported. A module
that fails to import, or a row that raises, shows up as an ERROR row; the run goes on.

The table is Markdown, so it can be pasted into ``benchmarks/README.md`` as it is. Columns:
``structexec`` and ``baseline`` are medians in the unit given in brackets after the metric;
``ratio`` is structexec / baseline; ``target`` says which way is better (``<=``: lower is
better, a time or cost; ``>=``: higher is better, a throughput) and ``ok`` whether the median
meets it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _harness  # noqa: E402  (needs the path set up above)
from _harness import REGISTRY, Bench, Row  # noqa: E402


@dataclass
class Result:
    metric: str
    module: str
    unit: str = ""
    structexec: float | None = None  # display unit
    baseline: float | None = None  # display unit
    ratio: float | None = None
    target: str = "-"
    ok: str = "-"
    error: str | None = None  # traceback
    message: str = ""  # one-line error, shown in the table
    seconds: float = 0.0


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.01 or a == 0:
        return f"{v:.2f}"
    return f"{v:.2e}"


def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.splitlines()[0][:100]


def discover(only: re.Pattern[str] | None) -> tuple[list[Row], list[Result]]:
    """Import every bench_*.py; return the selected rows and an error result per failed import."""
    errors: list[Result] = []
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken module must not kill the run
            res = Result(metric=f"{name}: import failed", module=name, ok="ERROR")
            res.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            res.message = one_line(exc)
            if only is None or only.search(name):
                errors.append(res)
    rows = [r for r in REGISTRY if only is None or only.search(f"{r.module} {r.metric}")]
    return rows, errors


def judge(r: Row, sx: float | None, base: float | None, ratio: float | None) -> str:
    checks: list[bool] = []
    lower = r.better == "lower"
    if r.target is not None:
        if ratio is None:
            return "n/a"
        checks.append(ratio <= r.target if lower else ratio >= r.target)
    if r.limit is not None:
        v = sx if sx is not None else base
        if v is None:
            return "n/a"
        checks.append(v <= r.limit if lower else v >= r.limit)
    if not checks:
        return "-"
    return "yes" if all(checks) else "NO"


def measure(r: Row, bench: Bench, reps: int) -> Result:
    res = Result(metric=f"{r.metric} [{r.unit}]", module=r.module, unit=r.unit)
    res.target = r.target_text()
    t0 = time.perf_counter()
    try:
        samples = [r.call(bench) for _ in range(r.reps or reps)]
    except Exception as exc:
        res.ok = "ERROR"
        res.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        res.message = one_line(exc)
        res.seconds = time.perf_counter() - t0
        return res
    res.seconds = time.perf_counter() - t0
    r.samples = samples
    sxs = [s for s, _ in samples if s is not None]
    bases = [b for _, b in samples if b is not None]
    sx = statistics.median(sxs) * r.scale if sxs else None
    base = statistics.median(bases) * r.scale if bases else None
    ratio = sx / base if sx is not None and base else None
    res.structexec, res.baseline, res.ratio = sx, base, ratio
    res.ok = judge(r, sx, base, ratio)
    return res


def environment(args: argparse.Namespace, reps: int) -> list[str]:
    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return [
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        f"structexec {version('structexec')}, trio {version('trio')}, "
        f"anyio {_harness.anyio_version() or 'not installed'}",
        f"mode: {'quick' if args.quick else 'full'}, reps={reps} (median reported)",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (n/10) and 3 reps")
    ap.add_argument("--only", metavar="PATTERN", help="regex on '<module> <metric>' (case-insens.)")
    ap.add_argument("--reps", type=int, help="repetitions per row (default 5, --quick 3)")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--check", action="store_true", help="exit 1 if a row is NO or ERROR")
    ap.add_argument("--tracebacks", action="store_true", help="print tracebacks of ERROR rows")
    args = ap.parse_args(argv)

    reps = args.reps or (3 if args.quick else 5)
    only = re.compile(args.only, re.I) if args.only else None
    rows, import_errors = discover(only)

    if args.list:
        for r in rows:
            print(f"{r.module:20} {r.metric} [{r.unit}]  target {r.target_text()}")
        for e in import_errors:
            print(f"{e.module:20} IMPORT ERROR {e.message}")
        return 0

    for text in environment(args, reps):
        print(f"# {text}")
    print()

    headers = ["metric", "structexec", "baseline", "ratio", "target", "ok"]
    names = [f"{r.metric} [{r.unit}]" for r in rows] + [e.metric for e in import_errors]
    w = [max([len(headers[0]), *map(len, names)]), 10, 10, 7, 16, 5]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(cells)) + " |"

    print(line(headers))
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    sys.stdout.flush()

    results: list[Result] = []
    for e in import_errors:
        results.append(e)
        print(line([e.metric, e.message, "-", "-", "-", "ERROR"]), flush=True)

    bench = Bench(quick=args.quick)
    t_start = time.perf_counter()
    for r in rows:
        res = measure(r, bench, reps)
        results.append(res)
        ratio = f"{res.ratio:.2f}x" if res.ratio is not None else "-"
        if res.ok == "ERROR":
            cells = [res.metric, res.message, "-", "-", res.target, "ERROR"]
        else:
            cells = [res.metric, fmt(res.structexec), fmt(res.baseline), ratio, res.target, res.ok]
        print(line(cells), flush=True)

    print()
    print(
        "ratio = structexec / baseline (medians). target '<=': lower is better (time/cost); "
        "'>=': higher is better (throughput); 'Nx' bounds the ratio, a unit bounds the value."
    )
    n_bad = sum(r.ok in ("NO", "ERROR") for r in results)
    print(
        f"{len(results)} rows in {time.perf_counter() - t_start:.1f}s; "
        f"{sum(r.ok == 'yes' for r in results)} ok, {sum(r.ok == 'NO' for r in results)} "
        f"missed target, {sum(r.ok == 'ERROR' for r in results)} errors."
    )

    errored = [r for r in results if r.error]
    if errored and args.tracebacks:
        for bad in errored:
            print(f"\n--- {bad.metric}\n{bad.error}", end="")
    elif errored:
        print("(run with --tracebacks to see the errors)")

    if args.json:
        payload = {
            "environment": environment(args, reps),
            "results": [vars(r) for r in results],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")

    return 1 if args.check and n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
