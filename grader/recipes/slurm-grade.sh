#!/usr/bin/env bash
# Grade a whole class on a Slurm cluster: a job array with one task per shard, then a merge job
# that starts when every task has succeeded and writes grades.csv, the feedback pages and the
# class report.
#
#   bash grader/recipes/slurm-grade.sh SUBMISSIONS OUT [SHARDS]
#
# Run it on a login node from the course checkout with the course's Python environment active
# (the jobs inherit it). SUBMISSIONS (nbgrader's <student>/<chapter>/<notebook>.ipynb layout) and
# OUT must be on a filesystem the compute nodes share. OUT receives part-I.csv (+ details) per
# shard, logs/, then grades.csv, feedback/ and report/.
#
# - Resources: 2 CPUs, 16 GiB and 12 hours per task by default; change them with sbatch's own
#   environment variables (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...) or below.
# - Isolation: compute nodes need bubblewrap, and the Python environment must lie outside the
#   checkout. As a normal user each kernel runs in its own namespaces under your uid; full
#   isolation (a uid per sandbox) needs root. Extra `trainperf grade` options go in
#   TRAINPERF_GRADE_ARGS, e.g. TRAINPERF_GRADE_ARGS="--chapters 1 2 --cell-timeout 120".
# - A failed task: grade that shard again with
#   `sbatch --array=I --export=ALL grader/recipes/slurm-grade.sh --task SUBMISSIONS OUT SHARDS`,
#   then run `bash grader/recipes/slurm-grade.sh --merge OUT`.
set -euo pipefail

usage() {
  echo "usage: $0 SUBMISSIONS OUT [SHARDS]   (submits the array and the merge job)" >&2
  exit 2
}

case "${1:-}" in
  --task)  # inside array task I: grade shard I of SHARDS
    [ $# -eq 4 ] || usage
    subs=$2 out=$3 shards=$4
    shard=${SLURM_ARRAY_TASK_ID:?--task runs inside a Slurm array task}
    read -ra extra <<< "${TRAINPERF_GRADE_ARGS:-}"
    exec trainperf --root "${TRAINPERF_ROOT:?}" grade "$subs" --shard "$shard/$shards" \
      --out "$out/part-$shard.csv" --jobs "${SLURM_CPUS_PER_TASK:-2}" "${extra[@]}"
    ;;
  --merge)  # after every task: one CSV, every feedback page, the class report
    [ $# -eq 2 ] || usage
    out=$2
    trainperf merge "$out"/part-*.csv --out "$out/grades.csv" --feedback "$out/feedback"
    trainperf report "$out/grades.csv" --out "$out/report"
    ;;
  -h|--help|"")
    usage
    ;;
  *)  # on the login node: submit the array, and the merge job after it
    if [ $# -lt 2 ] || [ $# -gt 3 ]; then usage; fi
    [ -d "$1" ] || { echo "$0: no submissions folder $1" >&2; exit 2; }
    subs=$(cd "$1" && pwd)
    mkdir -p "$2/logs"
    out=$(cd "$2" && pwd)
    shards=${3:-8}
    case "$shards" in ''|*[!0-9]*|0) echo "$0: SHARDS must be a positive number, got $shards" >&2; exit 2 ;; esac
    script=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
    TRAINPERF_ROOT=$(cd "$(dirname "$script")/../.." && pwd)
    export TRAINPERF_ROOT
    array=$(sbatch --parsable --export=ALL --job-name=trainperf-grade --array="1-$shards" \
      --cpus-per-task=2 --mem=16G --time=12:00:00 --output="$out/logs/grade-%a.log" \
      "$script" --task "$subs" "$out" "$shards")
    array=${array%%;*}  # --parsable prints "jobid[;cluster]"
    merge=$(sbatch --parsable --export=ALL --job-name=trainperf-merge --dependency="afterok:$array" \
      --cpus-per-task=1 --mem=4G --time=1:00:00 --output="$out/logs/merge.log" \
      "$script" --merge "$out")
    echo "submitted grading array $array ($shards shards) and merge job ${merge%%;*}; results in $out"
    ;;
esac
