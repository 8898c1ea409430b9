#!/bin/bash
# Scores an archive on a Slurm cluster: a job array of N tasks
# (ssae-score.sbatch, one shard each) and `ssae merge` as a job that runs
# once every task has succeeded. Prints the array's and the merge's job IDs.
#
# usage: ssae-submit.sh -n N -l LIST [-o OUTDIR] [--tasks 3,7] [--gpu]
#                       [--cpus C] [--model M] [--wait] [-- SBATCH_OPTION...]
#   -n N         number of shards (array tasks)
#   -l LIST      input list: one audio file or directory a line
#   -o OUTDIR    parts and the merged OUTDIR/scores.tsv (default out)
#   --tasks I,J  submit only these tasks again (after a failure): they
#                resume from their .partial files; the merge waits for them
#   --gpu        one GPU per task (--gres=gpu:1, --backend cuda)
#   --cpus C     cores per task (default 8)
#   --model M    model file (default: the model built into ssae)
#   --wait       wait for the merge job to end; exit with its status (0:
#                merged, 1: shards failed or inputs missing: see the log)
# Options after -- go to both sbatch calls (--account, --partition, ...).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
n="" list="" out=out tasks="" gpu=0 cpus=8 model="" wait=""
# the header above: on stdout with exit 0 for --help, on stderr with 2 for a mistake
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&"${1:-2}"; exit "${2:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    -l) list=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --tasks) tasks=$2; shift 2 ;;
    --gpu) gpu=1; shift ;;
    --cpus) cpus=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --wait) wait=1; shift ;;  # sbatch --wait on the merge job
    --) shift; break ;;
    -h|--help) usage 1 0 ;;
    *) echo "ssae-submit: unknown option '$1'" >&2; usage ;;
  esac
done
[[ "$n" =~ ^[1-9][0-9]*$ ]] && [ -n "$list" ] || usage
[ -r "$list" ] || { echo "ssae-submit: cannot read $list" >&2; exit 1; }
case "$list$out$model" in *,*)  # sbatch --export separates with commas
  echo "ssae-submit: a comma in a path cannot pass through sbatch --export" >&2; exit 2 ;;
esac
list=$(realpath "$list")
mkdir -p "$out/logs"
out=$(realpath "$out")

env="ALL,SSAE_LIST=$list,SSAE_OUT=$out,SSAE_SHARDS=$n"
opts=(--cpus-per-task="$cpus")
if [ "$gpu" = 1 ]; then
  opts+=(--gres=gpu:1)
  env="$env,SSAE_BACKEND=cuda"
fi
[ -n "$model" ] && env="$env,SSAE_MODEL=$(realpath "$model")"

array=$(sbatch --parsable --array="${tasks:-0-$((n - 1))}" --export="$env" \
  --output="$out/logs/score_%A_%a.log" "${opts[@]}" "$@" "$here/ssae-score.sbatch")
array=${array%%;*}

# Every part by name, so that a missing one is named too.
parts=""
for ((i = 0; i < n; i++)); do parts="$parts $(printf '%q' "$out/part-$i.tsv")"; done
echo "array job $array: $n shards of $list into $out"
status=0
merge=$(sbatch --parsable ${wait:+--wait} --dependency="afterok:$array" \
  --kill-on-invalid-dep=yes --job-name=ssae-merge --output="$out/logs/merge_%j.log" "$@" \
  --wrap="exec $(printf '%q' "${SSAE:-ssae}") merge --files-from $(printf '%q' "$list") \
-o $(printf '%q' "$out/scores.tsv")$parts") || status=$?
merge=${merge%%;*}
echo "merge job $merge: $out/scores.tsv"
exit "$status"
