#!/usr/bin/env bash
# The course on a real CUDA GPU (issue 6, path 4), as one short script that needs no network.
#
#   1. every chapter's solution notebook: `trainperf run --device cuda --full` (papermill); the
#      capstone (chapter 9) writes its report (GPT-2-small-sized GPT, baseline -> tuned) into
#      $OUT/capstone_report;
#   2. small real GPU profiler traces of the course model (torch.profiler, CPU + CUDA):
#      chapter 3 (NVTX / record_function ranges step/forward/backward/optimizer) and chapter 4
#      (ProfilerStep markers, host-to-device batch copies), each read back with the course's
#      own helpers to prove they parse;
#   3. the course model's measured MFU / HFU (helpers.mfu.measure_training) if helpers.mfu exists;
#      chapter 10's device path (NCCL collectives fitted and an FSDP2 run with >= 2 GPUs; with one
#      GPU, the line saying the chapter runs gloo on the CPU);
#   4. a summary: per-chapter GPU seconds, the GPU, torch, MFU, the capstone's baseline and
#      tuned MFU -> $OUT/summary.json.
#
# Usage
#   on a machine with network, once:  scripts/gpu_check.sh --fetch-wheels
#       downloads Python 3.12 wheels of what the GPU image lacks (papermill, ipykernel,
#       ipywidgets and their needs) into .whl/ (git-ignore it: echo /.whl/ >> .git/info/exclude)
#   on the GPU machine (carry .whl):  OUT=/some/dir scripts/gpu_check.sh
#       exits 2 at once, saying why, when torch sees no CUDA GPU; 1 when a chapter failed.
# Files written to $OUT (default build/gpu_check), at most 8, each well under 16 MiB:
#   gpu_check.log, summary.json, executed_notebooks.tar.gz, capstone_report.tar.gz (report.md,
#   report.json, report.png), ch03_course_model_trace.json.gz, ch04_course_model_trace.json.gz,
#   ch05_memory_snapshot.pickle.gz (chapter 5's CUDA memory snapshot of a GPT-2 small step, for
#   https://pytorch.org/memory_viz: the GPU one the issue asks to ship, labelled by its file name)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
OUT=${OUT:-build/gpu_check}
export PYTHONUNBUFFERED=1 PYDEVD_DISABLE_FILE_VALIDATION=1 MPLBACKEND=Agg

if [[ "${1:-}" == "--fetch-wheels" ]]; then
  set -e
  mkdir -p "$WHEELS"
  "$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$WHEELS" papermill ipykernel ipywidgets nbclient nbformat
  # The GPU image already has these (device README, KINDS.md): do not shadow its versions.
  for have in requests urllib3 idna certifi charset_normalizer PyYAML pyyaml tqdm aiohttp aiosignal \
      frozenlist multidict yarl propcache aiohappyeyeballs attrs packaging python_dateutil six \
      typing_extensions pygments psutil click filelock; do
    rm -f "$WHEELS/$have"-[0-9]*.whl
  done
  du -sh "$WHEELS"; ls "$WHEELS" | wc -l
  exit 0
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/gpu_check.log") 2>&1
start=$(date +%s)

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: FAILED: no CUDA GPU visible to torch ($("$PY" -c 'import torch; print(torch.__version__)' \
    2>&1 | tail -1)); nvidia-smi says: $(nvidia-smi -L 2>&1 | head -1). Run this on a GPU machine." >&2
  exit 2
fi
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu_check_site "$WHEELS"/*.whl || { echo "gpu_check: installing $WHEELS failed" >&2; exit 3; }
  export PYTHONPATH=/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"  # helpers and trainperf from this checkout
missing=$("$PY" -c "
import importlib.util as u
print(' '.join(m for m in ['papermill', 'ipykernel', 'ipywidgets', 'nbformat', 'helpers', 'trainperf']
               if u.find_spec(m) is None))")
if [[ -n "$missing" ]]; then
  echo "gpu_check: FAILED: missing Python packages: $missing; run scripts/gpu_check.sh --fetch-wheels" \
       "where there is network and carry $WHEELS" >&2
  exit 3
fi

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
"$PY" - <<'EOF'
import shutil, torch, helpers
from helpers import hardware, nvtx
spec = hardware.detect_gpu()
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), {torch.cuda.get_device_name(0)}, "
      f"table entry: {spec.name if spec else None}; nvtx backend: {nvtx.nvtx_backend()}; "
      f"nsys on PATH: {shutil.which('nsys')}")
EOF

echo "== 1. every chapter on the GPU: trainperf run --device cuda --full"
export CAPSTONE_REPORT_DIR="$OUT/capstone_report"
"$PY" -m trainperf.cli run --device cuda --full --out "$OUT/executed" --cell-timeout 300 \
  | tee "$OUT/run_table.txt"
run_status=${PIPESTATUS[0]}

echo "== 2-3. course-model traces (chapters 3 and 4) and MFU"
"$PY" - "$OUT" <<'EOF'
import json, re, sys, time
from pathlib import Path
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from helpers import models, nvtx, timeline

out = Path(sys.argv[1])
dev = torch.device("cuda")
cfg = models.course_config(dev, quick=True)  # GPT-2 small, seq 512: a trace of a few MB
model = models.build_model(cfg, dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
idx, tgt = models.make_batch(cfg, 8, cfg.seq_len, "cpu")
idx, tgt = idx.pin_memory(), tgt.pin_memory()
summary = {"config": cfg.name, "seq_len": cfg.seq_len, "batch": 8}

def step(ranges: bool):
    ctx = nvtx.annotate if ranges else (lambda name: torch.profiler.record_function(name))
    with ctx("step"):
        with ctx("h2d"):
            x, y = idx.to(dev, non_blocking=True), tgt.to(dev, non_blocking=True)
        with ctx("forward"), torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        with ctx("backward"):
            loss.backward()
        with ctx("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

for chapter, ranges in (("ch03", True), ("ch04", False)):
    path = out / f"{chapter}_course_model_trace.json.gz"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=2, active=3)) as prof:
        for _ in range(6):
            step(ranges)
            prof.step()
    torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    info = {"file": path.name, "MiB": round(path.stat().st_size / 2**20, 2)}
    if chapter == "ch03":
        info["ranges"] = nvtx.count_ranges(nvtx.trace_ranges(path))
    else:
        trace = timeline.load_trace(path)
        steps = timeline.step_breakdown(trace)
        info["steps"] = len(steps)
        info["mean_step"] = str(timeline.mean_step(steps)) if steps else None
        info["temporal"] = str(timeline.temporal_breakdown(trace))
    summary[chapter] = info
    print(chapter, json.dumps(info, indent=1, default=str))

try:
    from helpers import mfu
except ImportError:
    print("helpers.mfu does not exist yet: no MFU measured")
else:
    t0 = time.perf_counter()
    run = mfu.measure_training(device="cuda", quick=False, iters=20)
    print(run.report().format())
    summary["mfu"] = {"mfu": run.mfu, "hfu": run.hfu, "step_ms": run.step.median * 1e3,
                      "spread": run.step.spread, "peak": run.peak.describe(), "config": run.config.name,
                      "batch": run.batch_size, "seq_len": run.seq_len, "autocast": run.autocast,
                      "seconds": round(time.perf_counter() - t0, 1)}
    print(f"course model MFU {run.mfu:.1%}, HFU {run.hfu:.1%}, step {run.step.median * 1e3:.2f} ms")

# chapter 10's device path: NCCL with one GPU per rank when there are two GPUs or more; with one
# GPU (or none) the chapter runs gloo on the CPU and says so in one line
from helpers import distributed
rank_device, ranks, why = distributed.pick_device("cuda")
summary["ch10"] = {"device": rank_device, "ranks": ranks, "why": why}
print("ch10:", why)
if rank_device == "cuda":
    table = distributed.measure_collectives(device="cuda", world_size=ranks)
    print(table)
    summary["ch10"]["fits"] = {c: str(table.fit(c)) for c in distributed.COLLECTIVES}
    fsdp_run = distributed.record_fsdp(device="cuda", world_size=ranks, width=4096)
    print(fsdp_run)
    summary["ch10"]["fsdp_held"] = fsdp_run.held

capstone = out / "capstone_report" / "report.json"
if capstone.is_file():
    from helpers import report
    rep = report.read_report(capstone)
    base, tuned = rep.baseline, rep.tuned
    summary["capstone"] = {
        "config": rep.config["describe"], "gpu": rep.hardware["device_name"],
        "baseline": {"mfu": base["mfu"], "step_ms": base["step_time_ms"], "bottleneck": base["bottleneck"]},
        "tuned": {"name": tuned["name"], "mfu": tuned["mfu"], "hfu": tuned["hfu"],
                  "step_ms": tuned["step_time_ms"], "tokens_per_s": tuned["tokens_per_s"],
                  "bottleneck": tuned["bottleneck"], "peak_mem_mb": tuned["peak_mem_mb"]},
        "decisions": {r["name"]: r["decision"] for r in rep.rows}}
    print(f"capstone: baseline MFU {base['mfu']:.1%} -> tuned ({tuned['name']}) MFU {tuned['mfu']:.1%}")
else:
    print("capstone: no report.json (did chapter 9 fail?)")

rows = re.findall(r"^(\d\d_\S+)\s+(\S+)\s+([\d.]+)\s+(\S+)", (out / "run_table.txt").read_text(), re.M)
summary["chapters"] = {c: {"device": d, "seconds": float(s), "status": st} for c, d, s, st in rows}
summary["gpu"] = torch.cuda.get_device_name(0)
summary["torch"] = torch.__version__
(out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
EOF
py_status=$?

# chapter 5 writes its snapshot where it runs (its own folder)
if [[ -f solutions/05_memory/memory_snapshot.pickle ]]; then
  gzip -c solutions/05_memory/memory_snapshot.pickle > "$OUT/ch05_memory_snapshot.pickle.gz"
fi
tar czf "$OUT/executed_notebooks.tar.gz" -C "$OUT" executed run_table.txt 2>/dev/null \
  && rm -rf "$OUT/executed" "$OUT/run_table.txt"
if [[ -d "$OUT/capstone_report" ]]; then  # the report, not its profiler traces (kept in a temp folder)
  tar czf "$OUT/capstone_report.tar.gz" -C "$OUT" capstone_report && rm -rf "$OUT/capstone_report"
fi
echo "== per-chapter GPU seconds"
"$PY" -c "
import json, sys; s = json.load(open(sys.argv[1]))
for c, r in s.get('chapters', {}).items(): print(f'{c:<22} {r[\"seconds\"]:>7.1f} s  {r[\"status\"]}')
m = s.get('mfu'); print('course model MFU:', f\"{m['mfu']:.1%} (HFU {m['hfu']:.1%}, {m['config']}, {m['autocast']})\" if m else 'n/a')
c = s.get('capstone'); print('capstone MFU:', f\"baseline {c['baseline']['mfu']:.1%} -> tuned {c['tuned']['mfu']:.1%} ({c['tuned']['name']})\" if c else 'n/a')
" "$OUT/summary.json" 2>/dev/null || echo "(no summary.json)"
echo "gpu_check: $(( $(date +%s) - start )) s; trainperf run exit $run_status, traces/MFU exit $py_status; files in $OUT"
[[ $run_status -eq 0 && $py_status -eq 0 ]]
