#!/bin/bash
# What scoring an archive in shards costs, on this machine.
#
# (a) Overhead: the same recordings scored by one `ssae score` process
#     (--jobs = all cores) and by a 4-task Slurm job array (one-node Slurm
#     from tests/cluster/slurm_lib.sh, one core per task, --shard auto)
#     followed by `ssae merge`; and, without Slurm, the 4 shards run one
#     after the other (--jobs = all cores each): ssae's own cost of
#     sharding (listing and stat'ing the whole list in every task, the
#     digest, the .partial writes) apart from the scheduler's. The
#     recordings are generated clips (1 to 24 s) repeated as hard links
#     (--copies), so a long run needs no disk; the merged result is
#     checked against the single run. The array's tasks log their start
#     and end, so the scheduler's latency is reported on its own. Wall
#     clock and CPU time (user + system, GNU time) both: on a machine that
#     others share, the CPU time is the steadier measure of the work.
# (b) Balance: the largest shard's bytes over the mean for 2 to 64 shards
#     of 600 recordings of 1 s to 10 min (16 kHz 16-bit mono WAV sizes,
#     durations log-uniform, seeded). The partition weighs bytes on disk,
#     so the files are sparse (no audio in them): each shard is cut by the
#     real `ssae score --shard`, whose part lists every one of its files
#     (here as failure records, as nothing can be decoded), and the bench
#     adds up their sizes. Shown next to the same list cut into equal
#     file counts.
#
# usage: tools/bench/bench_cluster.sh [--copies N] [--repeat R] [--tasks T] [--no-slurm]
#   --tasks: shards of the array and of the in-turn run (default 4); with
#   as many tasks as cores every task has a core of its own from start to
#   end, as on a cluster where each task gets its cores
#   SSAE, SSAE_GEN: the programs (default build-h/ssae, build-h/tools/ssae-gen)
# Needs root for (a)'s Slurm (slurmd runs jobs as their user); without it,
# or with --no-slurm, (a) runs without the array.
set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SSAE=$(realpath "${SSAE:-$ROOT/build-h/ssae}")
SSAE_GEN=$(realpath "${SSAE_GEN:-$ROOT/build-h/tools/ssae-gen}")
COPIES=40
REPEAT=2
SLURM=1
TASKS=4
while [ $# -gt 0 ]; do
  case $1 in
    --copies) COPIES=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --tasks) TASKS=$2; shift 2 ;;
    --no-slurm) SLURM=0; shift ;;
    *) echo "usage: $0 [--copies N] [--repeat R] [--tasks T] [--no-slurm]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || SLURM=0
T=""
LOG_NAME=bench_cluster
# shellcheck source=../../tests/cluster/slurm_lib.sh
. "$ROOT/tests/cluster/slurm_lib.sh"
CORES=$(nproc)

now() { date +%s.%N; }
# Runs the command; appends its user + system seconds to $T/cpu.
cpu_of() { /usr/bin/time -a -o "$T/cpu" -f "%U %S" "$@"; }
cpu_sum() { awk '{ s += $1 + $2 } END { printf "%.2f", s }' "$1"; }
secs() { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$@"; }
min_of() { tr ' ' '\n' | sort -g | head -n 1; }

make_recordings() {
  local i c
  mkdir -p "$T/src" "$T/rec"
  for i in $(seq 1 24); do
    "$SSAE_GEN" --seed "$i" --seconds "$(((i * 7) % 24 + 1))" -o "$T/src/clip$(printf %02d "$i").wav"
  done
  for c in $(seq 1 "$COPIES"); do
    mkdir -p "$T/rec/m$(printf %03d "$c")"
    for i in "$T"/src/*.wav; do ln "$i" "$T/rec/m$(printf %03d "$c")/"; done
  done
  echo "$T/rec" >"$T/list.txt"
}

one_process() {
  local t0 t1
  rm -f "$T/cpu"
  t0=$(now)
  cpu_of "$SSAE" score --quiet --backend cpu --jobs "$CORES" --files-from "$T/list.txt" \
    >"$T/single.tsv"
  t1=$(now)
  echo "$(secs "$t0" "$t1")/$(cpu_sum "$T/cpu")"
}

shards_in_turn() {
  local t0 t1 k
  rm -rf "$T/seq" "$T/cpu" && mkdir -p "$T/seq"
  t0=$(now)
  for k in $(seq 0 $((TASKS - 1))); do
    cpu_of "$SSAE" score --quiet --backend cpu --jobs "$CORES" --files-from "$T/list.txt" \
      --shard "$k/$TASKS" -o "$T/seq/part-$k.tsv"
  done
  cpu_of "$SSAE" merge -o "$T/seq/merged.tsv" "$T"/seq/part-*.tsv
  t1=$(now)
  cmp -s "$T/seq/merged.tsv" "$T/single.tsv" || fail "the shards in turn merged differ from one run"
  echo "$(secs "$t0" "$t1")/$(cpu_sum "$T/cpu")"
}

# The array as tools/cluster/ssae-score.sbatch runs it (one core a task),
# and the merge as a job that depends on it (as ssae-submit.sh submits
# them); every job logs its start and end. Prints: submit to merged,
# submit to the first task's start, first start to last end, last end to
# merged (the merge job included).
slurm_array() {
  local t0 t1 cmd jid i
  rm -rf "$T/arr" && mkdir -p "$T/arr"
  cmd="echo start \$(date +%s.%N); /usr/bin/time -f 'cpu %U %S' $(printf '%q ' "$SSAE") score --quiet --backend cpu --jobs 1"
  cmd+=" --files-from $(printf '%q' "$T/list.txt") --shard auto"
  cmd+=" -o $(printf '%q' "$T/arr")/part-\$SLURM_ARRAY_TASK_ID.tsv; echo end \$(date +%s.%N)"
  t0=$(now)
  jid=$(sbatch --parsable --array="0-$((TASKS - 1))" --cpus-per-task=1 --job-name=bench \
    --chdir="$T" --output="$T/arr/task_%a.log" --wrap="$cmd") || fail "sbatch refused the array"
  sbatch --parsable --quiet --dependency="afterok:$jid" --cpus-per-task=1 --job-name=bench-merge \
    --chdir="$T" --output="$T/arr/merge.log" \
    --wrap="/usr/bin/time -f 'cpu %U %S' $(printf '%q ' "$SSAE") merge -o $(printf '%q' "$T/arr/merged.tsv") $(printf '%q' "$T/arr")/part-*.tsv && echo merged" \
    >/dev/null || fail "sbatch refused the merge"
  for i in $(seq 1 12000); do
    grep -qs '^merged$' "$T/arr/merge.log" && break
    sleep 0.05
  done
  t1=$(now)
  cmp -s "$T/arr/merged.tsv" "$T/single.tsv" || fail "the array's parts merged differ from one run"
  local first last
  first=$(grep -h '^start ' "$T"/arr/task_*.log | cut -d' ' -f2 | sort -g | head -n 1)
  last=$(grep -h '^end ' "$T"/arr/task_*.log | cut -d' ' -f2 | sort -g | tail -n 1)
  grep -h '^cpu ' "$T"/arr/task_*.log "$T/arr/merge.log" | cut -d' ' -f2- >"$T/cpu"
  local k s e spans=""
  for k in $(seq 0 $((TASKS - 1))); do
    s=$(grep -h '^start ' "$T/arr/task_$k.log" | cut -d' ' -f2)
    e=$(grep -h '^end ' "$T/arr/task_$k.log" | cut -d' ' -f2)
    spans+="$(secs "$first" "$s")-$(secs "$first" "$e"),"
  done
  echo "$(secs "$t0" "$t1")/$(cpu_sum "$T/cpu") $(secs "$t0" "$first") $(secs "$first" "$last") $(secs "$last" "$t1") ${spans%,}"
}

bench_overhead() {
  make_recordings
  local n audio single=() inturn=() arr=() r a
  n=$(find "$T/rec" -name '*.wav' | wc -l)
  audio=0
  for r in $(seq 1 24); do audio=$((audio + ((r * 7) % 24 + 1) * COPIES)); done
  if [ "$SLURM" = 1 ]; then
    ensure_packages
    start_munge
    write_slurm_conf
    start_slurm
    wait_node_idle
  fi
  for r in $(seq 1 "$REPEAT"); do
    single+=("$(one_process)")
    inturn+=("$(shards_in_turn)")
    [ "$SLURM" = 1 ] && arr+=("$(slurm_array)")
  done
  # Each run: "wall/cpu"; the best of each (by wall, by CPU separately).
  local sw sc qw qc
  sw=$(printf '%s\n' "${single[@]}" | cut -d/ -f1 | min_of)
  sc=$(printf '%s\n' "${single[@]}" | cut -d/ -f2 | min_of)
  qw=$(printf '%s\n' "${inturn[@]}" | cut -d/ -f1 | min_of)
  qc=$(printf '%s\n' "${inturn[@]}" | cut -d/ -f2 | min_of)
  pct() { python3 -c "print('%+.1f %%' % (($1 / $2 - 1) * 100))"; }
  echo "(a) $n files, $audio s of audio, $CORES cores; best of $REPEAT runs (wall s / CPU s)"
  printf '    one process (--jobs %d):              %7.2f / %7.2f\n' "$CORES" "$sw" "$sc"
  printf '    %d shards in turn + merge, no Slurm:   %7.2f / %7.2f   %s / %s\n' "$TASKS" \
    "$qw" "$qc" "$(pct "$qw" "$sw")" "$(pct "$qc" "$sc")"
  if [ "$SLURM" = 1 ]; then
    local aw ac x first span tail
    aw=$(printf '%s\n' "${arr[@]}" | cut -d' ' -f1 | cut -d/ -f1 | min_of)
    ac=$(printf '%s\n' "${arr[@]}" | cut -d' ' -f1 | cut -d/ -f2 | min_of)
    printf '    Slurm array of %d (1 core each) + merge job: %7.2f / %7.2f   %s / %s\n' "$TASKS" \
      "$aw" "$ac" "$(pct "$aw" "$sw")" "$(pct "$ac" "$sc")"
    for x in "${arr[@]}"; do
      read -r _ first span tail each <<<"$x"
      echo "      run: submit to first task $first s, tasks $span s, last task to merged $tail s"
      echo "      each task from the first start (s): $each"
    done
  fi
  echo "    (runs: one ${single[*]}; in turn ${inturn[*]}${arr:+; array ${arr[*]}})"
}

bench_balance() {
  mkdir -p "$T/sparse"
  python3 - "$T/sparse" >"$T/sparse.list" <<'PY'
import math, os, random, sys
d = sys.argv[1]
rng = random.Random(19)
for i in range(600):
    secs = math.exp(rng.uniform(math.log(1), math.log(600)))
    p = os.path.join(d, "m%02d" % (i % 37), "r%04d.wav" % i)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.truncate(44 + 2 * int(secs * 16000))
    print(p)
PY
  echo "(b) 600 files of 1 s to 10 min (sparse), largest shard / mean (bytes):"
  printf '    %6s  %-28s  %s\n' shards "ssae score --shard (bytes)" "equal file counts"
  local n k
  for n in 2 4 8 16 32 64; do
    rm -f "$T"/sparse-part-*
    for k in $(seq 0 $((n - 1))); do
      "$SSAE" score --quiet --files-from "$T/sparse.list" --shard "$k/$n" \
        -o "$T/sparse-part-$k.tsv" 2>/dev/null || true
      [ -f "$T/sparse-part-$k.tsv" ] || fail "shard $k/$n wrote no part"
    done
    python3 - "$n" "$T" <<'PY'
import glob, os, sys
n, t = int(sys.argv[1]), sys.argv[2]
loads, files = [], []
for k in range(n):
    lines = [l.rstrip("\n").split("\t") for l in open("%s/sparse-part-%d.tsv" % (t, k))][1:]
    paths = [l[1] for l in lines if l[0] == "# ssae-failed"]
    loads.append(sum(os.stat(p).st_size for p in paths))
    files.append(len(paths))
assert sum(files) == 600, files
mean = sum(loads) / n
# The same list (sorted) cut into n runs of equal file counts.
paths = sorted(p.strip() for p in open("%s/sparse.list" % t))
sizes = [os.stat(p).st_size for p in paths]
cut = [sum(sizes[i * len(sizes) // n:(i + 1) * len(sizes) // n]) for i in range(n)]
print("    %6d  %-28s  %.3f" % (n, "%.5f (%d-%d files)" % (max(loads) / mean, min(files),
                                                            max(files)), max(cut) / mean))
PY
  done
}

main() {
  trap cleanup EXIT
  trap 'exit 1' INT TERM
  make_tmp
  bench_balance
  bench_overhead
}

main "$@"
