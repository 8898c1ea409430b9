#!/bin/bash
# A real one-node Slurm on this machine, started and stopped by this test:
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

log() { echo "slurm_test: $*" >&2; }

fail() {
  log "FAIL: $*"
  show_logs
  exit 1
}

show_logs() {
  [ -n "$T" ] || return 0
  local f
  for f in "$T"/log/*.log "$T"/jobs/*.log; do
    [ -f "$f" ] || continue
    echo "---- $f (last lines)" >&2
    tail -n 15 "$f" >&2
  done
}

ensure_packages() {
  local have=1 p
  if [ "$(id -u)" -ne 0 ]; then
    log "SKIP: slurmd runs jobs as their user and so must run as root; run the test as root"
    exit 77
  fi
  for p in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch; do
    [ -x "$p" ] || have=0
  done
  [ "$have" = 1 ] && return 0
  log "installing slurm-wlm and munge"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=120 \
      --no-install-recommends slurm-wlm munge >&2; then
    log "SKIP: slurm-wlm and munge are not installed and cannot be (tools/install-deps.sh --test)"
    exit 77
  fi
}

# Stops what this test started, by the pid files it gave each daemon.
cleanup() {
  local rc=$? name pid i
  trap - EXIT INT TERM
  close_gate
  if [ -n "$T" ] && [ -f "$T/slurm.conf" ] && [ -f "$T/run/slurmctld.pid" ]; then
    SLURM_CONF="$T/slurm.conf" scancel --quiet --full --user="$(id -un)" 2>/dev/null || true
    for i in $(seq 1 20); do
      [ -z "$(SLURM_CONF="$T/slurm.conf" squeue -h 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for name in slurmd slurmctld munged; do
    [ -n "$T" ] && [ -f "$T/run/$name.pid" ] || continue
    pid=$(cat "$T/run/$name.pid")
    kill "$pid" 2>/dev/null || continue
    for i in $(seq 1 40); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
  done
  [ -n "$T" ] && [ "$rc" = 0 ] && rm -rf "$T"
  [ -n "$T" ] && [ "$rc" != 0 ] && log "files kept in $T"
  exit "$rc"
}

make_tmp() {
  T=$(mktemp -d /tmp/ssae-slurm-XXXXXX)
  # munged wants its socket's directories searchable by all, its key private.
  chmod 755 "$T"
  mkdir -m 755 "$T/run"
  mkdir -m 700 "$T/munge"
  mkdir -p "$T/state" "$T/spool" "$T/log" "$T/jobs" "$T/clips"
}

start_munge() {
  head -c 1024 /dev/urandom >"$T/munge/munge.key"
  chmod 400 "$T/munge/munge.key"
  /usr/sbin/munged --key-file="$T/munge/munge.key" --socket="$T/run/munge.sock" \
    --pid-file="$T/run/munged.pid" --log-file="$T/log/munged.log" \
    --seed-file="$T/munge/munge.seed" || fail "munged did not start"
  munge -S "$T/run/munge.sock" -n | unmunge -S "$T/run/munge.sock" >/dev/null ||
    fail "munge does not answer"
}

free_ports() {
  python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])'
}

write_slurm_conf() {
  local host ports
  host=$(hostname -s)
  read -r -a ports <<<"$(free_ports)"
  cat >"$T/slurm.conf" <<EOF
ClusterName=ssaetest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/run/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
InactiveLimit=0
KillWait=2
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=500 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  # Read only with cgroup plugins, which this configuration does not use.
  echo "CgroupPlugin=autodetect" >"$T/cgroup.conf"
  export SLURM_CONF="$T/slurm.conf"
}

start_slurm() {
  /usr/sbin/slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
  /usr/sbin/slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
}

wait_node_idle() {
  local i state=""
  for i in $(seq 1 120); do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    [ "$state" = idle ] && return 0
    sleep 0.5
  done
  fail "the node is not idle after 60 s (state '$state')"
}

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

# Lets one reader through the gate: one writer, one copy of the clip (a
# writer that stayed would let a slow reader see two). Each run that
# reads the gate opens it first.
open_gate() {
  close_gate
  python3 -c 'import sys; open(sys.argv[2], "wb").write(open(sys.argv[1], "rb").read())' \
    "$T/gate-source.wav" "$T/clips/pump/zz-gate.wav" &
  echo $! >"$T/run/gate.pid"
}

# Stops a writer that no reader came for.
close_gate() {
  [ -n "$T" ] && [ -f "$T/run/gate.pid" ] || return 0
  kill "$(cat "$T/run/gate.pid")" 2>/dev/null || true
  wait "$(cat "$T/run/gate.pid")" 2>/dev/null || true
  rm -f "$T/run/gate.pid"
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

# sbatch NAME ARRAY COMMAND [sbatch options...]: waits for the array; its
# exit status is the job's.
submit_wait() {
  local name=$1 array=$2 cmd=$3
  shift 3
  sbatch --wait --quiet --array="$array" --job-name="$name" --chdir="$T" \
    --output="$T/jobs/${name}_%a.log" "$@" --wrap="$cmd"
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
