#!/bin/bash
# A real one-node Slurm on this machine (slurm_lib.sh), started and stopped by this test:
# munged with a generated key, slurmctld and slurmd (Debian's slurm-wlm) with
# a generated slurm.conf that needs no cgroups (linuxproc, task/none), ports
# picked free on loopback, every file in one temporary directory. It then
# runs the sharded work as a job array the way tools/cluster/ssae-score.sbatch
# does:
#   1. a 4-task array over a directory of generated clips, --shard auto;
#      the parts (results and windows) merged by `ssae merge` equal one
#      plain run, line for line;
#   2. a task cancelled mid-way (scancel) and submitted again with --resume
#      finishes without redoing the files it had done: a FIFO among the
#      clips holds its task until the test opens it, so the cancel lands
#      at the same file every run, and the files done before it are then
#      overwritten (same size, other bytes): the merged result still
#      equals the plain run only when they were not read again;
#   3. tools/cluster/ssae-score.sbatch is a script this Slurm accepts.
# The task command is TASK (below): `ssae score --shard` itself, on the CPU,
# one decoding thread.
#
# usage: slurm_test.sh SSAE_GEN   (SSAE: the ssae program)
# Exit: 0 pass, 1 fail, 77 when slurm-wlm and munge cannot be installed
# (or the test does not run as root, which slurmd needs).
set -euo pipefail

SSAE_GEN=$(realpath "$1")
SSAE=$(realpath "${SSAE:?SSAE must name the ssae program}")
SSAE_SOURCE_ROOT=${SSAE_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
TASKS=4
T=""
LOG_NAME=slurm_test
# shellcheck source=slurm_lib.sh
. "$(dirname "$0")/slurm_lib.sh"

# Clips of mixed lengths (1 to 24 s) in two machine directories, and the
# list a user would give --files-from.
make_clips() {
  local i secs
  mkdir -p "$T/clips/fan" "$T/clips/pump"
  for i in $(seq 1 24); do
    secs=$(((i * 7) % 24 + 1))
    "$SSAE_GEN" --seed "$i" --seconds "$secs" \
      -o "$T/clips/$([ $((i % 2)) = 0 ] && echo fan || echo pump)/clip$(printf %02d "$i").wav"
  done
  # The gate: last in the list, so every file of its shard comes first.
  cp "$T/clips/fan/clip02.wav" "$T/gate-source.wav"
  mkfifo "$T/clips/pump/zz-gate.wav"
  echo "$T/clips/pump" >"$T/list.txt"
  echo "$T/clips/fan" >>"$T/list.txt"
}

# The task: one shard of the list scored by `ssae score --shard`, to
# DIR/part-$SLURM_ARRAY_TASK_ID.tsv and its windows to
# DIR/windows-$SLURM_ARRAY_TASK_ID.tsv. $1: DIR; the rest: more options.
TASK() {
  local dir=$1
  shift
  printf '%q ' "$SSAE" score --files-from "$T/list.txt" --quiet --jobs 1 --backend cpu "$@"
  printf -- '-o %q/part-"$SLURM_ARRAY_TASK_ID".tsv ' "$dir"
  printf -- '--windows %q/windows-"$SLURM_ARRAY_TASK_ID".tsv' "$dir"
}

# The same files in one plain `ssae score` run of the directory: what the
# merged parts must equal.
reference() {
  open_gate
  "$SSAE" score --quiet --backend cpu --windows "$T/reference.windows.tsv" "$T/clips" \
    >"$T/reference.tsv" || fail "the reference run failed"
  [ "$(wc -l <"$T/reference.tsv")" = 25 ] || fail "the reference run scored $(wc -l <"$T/reference.tsv") files, not 25"
}

# The parts must be shards 0..TASKS-1 of one list, each complete.
check_parts() {
  local dir=$1 k inputs
  inputs=$(find "$T/clips" -name '*.wav' | wc -l)
  for k in $(seq 0 $((TASKS - 1))); do
    [ -f "$dir/part-$k.tsv" ] || fail "$dir/part-$k.tsv missing"
    head -n 1 "$dir/part-$k.tsv" | grep -q "^# ssae-shard $k/$TASKS inputs=$inputs " ||
      fail "$dir/part-$k.tsv: header $(head -n 1 "$dir/part-$k.tsv")"
    [ ! -e "$dir/part-$k.tsv.partial" ] || fail "$dir/part-$k.tsv.partial left behind"
    [ -f "$dir/windows-$k.tsv" ] || fail "$dir/windows-$k.tsv missing"
  done
}

merge_and_compare() {
  local dir=$1
  "$SSAE" merge --files-from "$T/list.txt" -o "$dir/merged.tsv" "$dir"/part-*.tsv ||
    fail "ssae merge failed on $dir"
  "$SSAE" merge -o "$dir/merged.windows.tsv" "$dir"/windows-*.tsv ||
    fail "ssae merge failed on the windows of $dir"
  local got
  for got in merged merged.windows; do
    cmp "$dir/$got.tsv" "$T/reference${got#merged}.tsv" || {
      diff "$dir/$got.tsv" "$T/reference${got#merged}.tsv" | head -n 20 >&2
      fail "$dir/$got.tsv differs from one plain run"
    }
  done
}

test_array() {
  mkdir -p "$T/array"
  open_gate
  submit_wait array "0-$((TASKS - 1))" \
    "$(TASK "$T/array" --shard auto --resume)" ||
    fail "the array job failed"
  check_parts "$T/array"
  merge_and_compare "$T/array"
  log "array: $TASKS parts merged, equal to one plain run"
}

# The shard that holds the gate (from the array's parts).
gate_task() {
  local f
  f=$(grep -l "/zz-gate.wav$(printf '\t')" "$T/array"/part-*.tsv)
  f=${f##*/part-}
  echo "${f%.tsv}"
}

# With the gate closed, the gate's task stops at it; it is cancelled there
# and submitted again alone (--shard-count: the task ID is the shard) with
# --resume and the gate open.
test_cancel_resume() {
  local dir="$T/resume" job k done_before total f i
  mkdir -p "$dir"
  k=$(gate_task)
  close_gate
  job=$(sbatch --parsable --array="0-$((TASKS - 1))" --job-name=cancel --chdir="$T" \
    --output="$T/jobs/cancel_%a.log" --wrap="$(TASK "$dir" --shard auto --resume)")
  total=$(sed -n "1s/.* files=\([0-9]*\) .*/\1/p" "$T/array/part-$k.tsv")
  for i in $(seq 1 600); do
    [ "$(grep -c '^[^#]' "$dir/part-$k.tsv.partial" 2>/dev/null)" = $((total - 1)) ] && break
    sleep 0.1
  done
  scancel "${job}_$k"
  for i in $(seq 1 300); do
    [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
    sleep 0.2
  done
  [ ! -e "$dir/part-$k.tsv" ] || fail "the cancelled task's part is there, as if complete"
  done_before=$(grep -c '^[^#]' "$dir/part-$k.tsv.partial" || true)
  [ "$done_before" = $((total - 1)) ] ||
    fail "task $k was cancelled after $done_before of its $total files, not at the gate"
  # Read again, these would give other results.
  for f in $(grep '^[^#]' "$dir/part-$k.tsv.partial" | cut -f1); do
    head -c "$(stat -c %s "$f")" /dev/urandom | dd of="$f" conv=notrunc status=none
  done
  open_gate
  submit_wait resume "$k" "$(TASK "$dir" --shard auto --shard-count "$TASKS" --resume)" ||
    fail "the resubmitted task failed"
  grep -q "$done_before of $total files done already" "$T/jobs/resume_$k.log" ||
    fail "the resumed task did not keep the $done_before files done"
  check_parts "$dir"
  merge_and_compare "$dir"
  log "cancel and resume: task $k cancelled at its file $total, $done_before kept, merged equal"
}

# The example batch script is one this Slurm accepts (its directives,
# with the sizes of this machine).
test_example_script() {
  sbatch --test-only --array="0-$((TASKS - 1))" --cpus-per-task=1 --mem-per-cpu=10M \
    --export="ALL,SSAE_LIST=$T/list.txt,SSAE_OUT=$T/example,SSAE_SHARDS=$TASKS" \
    --output="$T/jobs/example_%a.log" "$SSAE_SOURCE_ROOT/tools/cluster/ssae-score.sbatch" \
    2>"$T/example.out" || { cat "$T/example.out" >&2; fail "sbatch refuses ssae-score.sbatch"; }
  grep -q "to start at" "$T/example.out" || fail "sbatch --test-only: $(cat "$T/example.out")"
}

main() {
  ensure_packages
  trap cleanup EXIT
  trap 'exit 1' INT TERM
  make_tmp
  start_munge
  write_slurm_conf
  start_slurm
  wait_node_idle
  make_clips
  reference
  test_array
  test_cancel_resume
  test_example_script
  log "pass"
}

main "$@"
