# A one-node Slurm on this machine for tests and benchmarks, sourced by
# tests/cluster/slurm_test.sh and tools/bench/bench_cluster.sh: munged
# with a generated key, slurmctld and slurmd (Debian's slurm-wlm) with a
# generated slurm.conf that needs no cgroups (linuxproc, task/none), ports
# picked free on loopback, every file under one temporary directory $T;
# cleanup stops every daemon it started (by their pid files) and removes
# $T when the run passed. The caller sets LOG_NAME and T="" and installs
# cleanup as its EXIT trap. Needs root (slurmd runs jobs as their user).

log() { echo "${LOG_NAME:-slurm}: $*" >&2; }

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

# sbatch NAME ARRAY COMMAND [sbatch options...]: waits for the array; its
# exit status is the job's.
submit_wait() {
  local name=$1 array=$2 cmd=$3
  shift 3
  sbatch --wait --quiet --array="$array" --job-name="$name" --chdir="$T" \
    --output="$T/jobs/${name}_%a.log" "$@" --wrap="$cmd"
}
