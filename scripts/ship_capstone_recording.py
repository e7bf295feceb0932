"""Ship a capstone recording with the package: its report and the profiler trace of every row.

    python -m helpers.report record --device cpu --also checkpoint --out /tmp/rec-quick
    python scripts/ship_capstone_recording.py /tmp/rec-quick cpu-quick

copies ``report.json`` to ``src/helpers/data/capstone_recorded_<name>.json`` and each row's trace
to ``src/helpers/data/capstone_recorded_traces/<name>/<NN>-<row>.json.gz`` (NN: the row's place
in the report, so a change tried twice keeps both traces), and points each row's ``trace`` at
its shipped copy (a path inside the package's data folder; ``helpers.report.recorded_row_trace``
opens it). Nothing else in the report changes: the numbers are shipped as measured.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src" / "helpers" / "data"


def ship(report_dir: Path, name: str) -> list[Path]:
    source = report_dir / "report.json"
    if not source.is_file():
        raise FileNotFoundError(f"no report.json in {report_dir}: give the --out folder of a recording")
    data = json.loads(source.read_text(encoding="utf-8"))
    folder = DATA / "capstone_recorded_traces" / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    written = []
    for i, row in enumerate(data["rows"]):
        trace = Path(row["trace"])
        if not trace.is_file():
            raise FileNotFoundError(f"row {row['name']}: its trace {trace} is gone; record again")
        target = folder / f"{i:02d}-{row['name']}.json.gz"
        shutil.copyfile(trace, target)
        row["trace"] = target.relative_to(DATA).as_posix()
        written.append(target)
    out = DATA / f"capstone_recorded_{name}.json"
    out.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    return [out, *written]


README = DATA / "capstone_recorded_README.md"
START, END = "<!-- recordings:start -->", "<!-- recordings:end -->"


def readme_table() -> str:
    """The README's table of shipped recordings, written from the recordings' own headers."""
    lines = [
        "| name | file | recorded on | date | load average (1 min, start–end) | took | commit | command |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(DATA.glob("capstone_recorded_*.json")):
        rec = json.loads(path.read_text(encoding="utf-8"))["recorded"]
        load = rec.get("load_average_1min") or {}
        lines.append(
            f"| `{path.stem.removeprefix('capstone_recorded_')}` | `{path.name}` | {rec['where']}, "
            f"{rec['device_model']}, {rec['threads']} torch thread(s) of {rec['cpu_count']} CPUs, "
            f"torch {rec['torch']} | {rec['date']} | {load.get('start')}–{load.get('end')} on "
            f"{rec['cpu_count']} CPUs | {rec['seconds']:.0f} s | {rec['commit']} | `{rec['command']}` |"
        )
    return "\n".join(lines)


def write_readme() -> None:
    text = README.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{START}\n{readme_table()}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(
            "usage: python scripts/ship_capstone_recording.py REPORT_DIR NAME (cpu-quick or cpu-full)",
            file=sys.stderr,
        )
        return 2
    try:
        paths = ship(Path(argv[0]), argv[1])
    except (FileNotFoundError, KeyError, json.JSONDecodeError) as err:
        print(f"ship_capstone_recording: {err}", file=sys.stderr)
        return 2
    write_readme()
    print("shipped:", *paths, README, sep="\n  ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
