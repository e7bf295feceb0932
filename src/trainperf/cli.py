"""The ``trainperf`` command: build, run and grade the course's notebooks."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .course import CourseError, chapters, find_root, require_languages


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainperf", description=__doc__)
    parser.add_argument("--root", type=Path, help="course checkout (default: found from cwd)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="regenerate notebooks/ and notebooks/<lang>/ from solutions/")
    p.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 naming each file notebooks/ gets wrong"
    )
    p.add_argument("--chapters", nargs="+", help="chapter names or numbers (default: all)")

    p = sub.add_parser("run", help="execute solution notebooks headless (papermill)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--chapters", nargs="+", help="chapter names or numbers (default: all)")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", dest="quick", action="store_true", default=True, help="small configuration (default)"
    )
    size.add_argument("--full", dest="quick", action="store_false", help="full-size configuration")
    p.add_argument("--jobs", "-j", type=int, default=1, help="notebooks run in parallel")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("build/executed"),
        help="folder for executed notebooks (default: build/executed)",
    )
    p.add_argument("--cell-timeout", type=int, default=600, help="seconds per cell")
    p.add_argument(
        "--lang",
        nargs="+",
        default=["en"],
        help="languages to run, e.g. en zh (default: en); zh goes to <out>/zh/",
    )

    p = sub.add_parser("site", help="build the course website from notebooks/ and an executed run")
    p.add_argument(
        "--out", type=Path, default=Path("build/site"), help="folder for the site (default: build/site)"
    )
    p.add_argument("--lang", nargs="+", default=["en", "zh"], help="languages (default: en zh)")
    p.add_argument("--chapters", nargs="+", help="chapter names or numbers (default: all)")
    p.add_argument(
        "--executed",
        type=Path,
        default=Path("build/executed"),
        help="`trainperf run --lang ...` output to take the outputs from (default: build/executed)",
    )
    p.add_argument(
        "--repo-url",
        help="GitHub repository the launch links open (default: [project.urls] Source in pyproject.toml)",
    )

    p = sub.add_parser("grade", help="autograde a folder of submissions into a CSV (nbgrader)")
    p.add_argument("submissions", type=Path, help="folder of <student>/<chapter>/<notebook>.ipynb")
    p.add_argument("--out", type=Path, default=Path("grades.csv"), help="CSV to write")
    p.add_argument(
        "--chapters",
        nargs="+",
        help="chapter names or numbers, or 'all' to count a chapter a student did not "
        "hand in as 0 (default: the chapters found in the submissions)",
    )
    p.add_argument("--jobs", "-j", type=int, default=1, help="students graded in parallel")
    p.add_argument(
        "--timeout", type=float, default=600, help="seconds allowed for one notebook (default 600)"
    )
    p.add_argument("--cell-timeout", type=int, default=60, help="seconds allowed per cell (default 60)")
    p.add_argument(
        "--memory-mib",
        type=int,
        default=6144,
        help="address-space cap for a submission's kernel in MiB (0 = none; default 6144)",
    )
    p.add_argument(
        "--file-mib", type=int, default=256, help="largest file a submission may write, in MiB (default 256)"
    )
    p.add_argument(
        "--disk-mib",
        type=int,
        default=1024,
        help="a submission's private scratch disk (/tmp) in MiB (default 1024)",
    )
    for unit in ("memory", "file", "disk"):  # the old names (MiB all along), kept out of --help
        p.add_argument(
            f"--{unit}-mb", type=int, dest=f"{unit}_mib", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    p.add_argument(
        "--processes",
        type=int,
        default=256,
        help="processes and threads a submission may run (isolated runs; default 256)",
    )
    p.add_argument(
        "--require-isolation",
        action="store_true",
        help="refuse to grade unless submissions run isolated (root + bubblewrap)",
    )
    p.add_argument("--feedback", type=Path, help="write one feedback HTML page per student here")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="ignore the progress file of an earlier run and grade everything again",
    )
    p.add_argument("--workdir", type=Path, help="keep the scratch course here (debugging)")
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="grade only shard I of N (by student, balanced by notebook count); "
        "combine the parts with `trainperf merge`",
    )

    p = sub.add_parser("merge", help="combine the parts of a sharded grading run into one CSV")
    p.add_argument("parts", type=Path, nargs="+", help="the part CSVs (each with its .details.jsonl)")
    p.add_argument("--out", type=Path, required=True, help="merged CSV to write")
    p.add_argument("--feedback", type=Path, help="write every student's feedback page here")

    p = sub.add_parser("report", help="class report: per-cell pass rates, score plots, flagged work")
    p.add_argument("grades", type=Path, help="a grades CSV (with its .details.jsonl) from grade or merge")
    p.add_argument("--out", type=Path, default=Path("report"), help="folder to write (default: report)")

    p = sub.add_parser(
        "discriminate", help="prove graded cells discriminate: stub 0, solution full, mistakes 0"
    )
    p.add_argument("--chapters", nargs="+", help="chapter names or numbers (default: all)")
    p.add_argument("--jobs", "-j", type=int, default=2, help="submissions graded in parallel")
    p.add_argument("--workdir", type=Path, help="keep submissions and scratch courses here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "merge":  # needs no checkout: a merge machine may hold only the parts
            from .grading.parts import merge

            rows = merge(args.parts, args.out, args.feedback)
            print(f"wrote {args.out} ({len(rows)} students from {len(args.parts)} part(s))")
            return 0
        if args.command == "report":
            from .grading.class_report import report

            page = report(args.grades, args.out)
            print(f"wrote {page}")
            return 0
        root = args.root.resolve() if args.root else find_root()
        wanted = getattr(args, "chapters", None)
        if args.command == "grade" and wanted is not None and [w.lower() for w in wanted] == ["all"]:
            wanted = chapters(root)
        if wanted is not None:
            wanted = chapters(root, wanted)  # an unknown chapter is refused before torch loads
        if args.command == "build":
            from .build import build

            diffs = build(root, wanted, check=args.check)
            if args.check:
                for line in diffs:
                    print(f"out of date: {line}", file=sys.stderr)
                if diffs:
                    print(
                        "notebooks/ (or a translation) is not what solutions/ and i18n/ generate: "
                        "update the translations named above, then run `trainperf build`.",
                        file=sys.stderr,
                    )
                    return 1
                print("notebooks/ matches solutions/ and the translations are up to date.")
            return 0
        if args.command == "run":
            from .run import run

            require_languages(root, args.lang)  # before torch loads, like an unknown chapter
            device = args.device
            if device == "auto":
                import torch

                device = "cuda" if torch.cuda.is_available() else "cpu"
            out = args.out if args.out.is_absolute() else Path.cwd() / args.out
            results = run(
                root,
                wanted,
                out,
                device=device,
                quick=args.quick,
                jobs=args.jobs,
                cell_timeout=args.cell_timeout,
                langs=tuple(args.lang),
            )
            return 0 if all(r.status == "ok" for r in results) else 1
        if args.command == "site":
            from .site import build_site

            out = args.out.resolve()
            for line in build_site(
                root, out, args.lang, wanted, executed_dir=args.executed.resolve(), repo_url=args.repo_url
            ):
                print(f"trainperf site: warning: {line}", file=sys.stderr)
            print(
                f"site written to {out} (open {out / 'index.html'}, or serve it: "
                f"python -m http.server -d {out})"
            )
            return 0
        if args.command == "grade":
            from .grading.grade import Limits, grade
            from .grading.shards import Shard

            shard = Shard.parse(args.shard) if args.shard is not None else None
            os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
            for name in ("timeout", "cell_timeout", "file_mib", "disk_mib", "processes"):
                if getattr(args, name) <= 0:
                    raise CourseError(
                        f"--{name.replace('_', '-')} must be positive, got {getattr(args, name):g}."
                    )
            if args.memory_mib < 0:
                raise CourseError(f"--memory-mib must be 0 (no cap) or positive, got {args.memory_mib}.")
            limits = Limits(
                cell_timeout=args.cell_timeout,
                notebook_timeout=args.timeout,
                memory_mib=args.memory_mib or None,
                file_mib=args.file_mib,
                disk_mib=args.disk_mib,
                processes=args.processes,
            )
            grade(
                root,
                args.submissions.resolve(),
                args.out.resolve(),
                wanted,
                jobs=args.jobs,
                limits=limits,
                workdir=args.workdir.resolve() if args.workdir else None,
                feedback=args.feedback.resolve() if args.feedback else None,
                fresh=args.fresh,
                require_isolation=args.require_isolation,
                shard=shard,
            )
            return 0
        if args.command == "discriminate":
            from .discriminate import discriminate

            os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
            failures = discriminate(
                root, wanted, jobs=args.jobs, workdir=args.workdir.resolve() if args.workdir else None
            )
            for line in failures:
                print(f"NOT DISCRIMINATING: {line}", file=sys.stderr)
            print("every graded cell discriminates." if not failures else f"{len(failures)} problem(s).")
            return 1 if failures else 0
    except CourseError as exc:
        print(f"trainperf: {exc}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
