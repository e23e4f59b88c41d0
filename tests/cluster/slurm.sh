# A real Slurm on this one machine, for the cluster tests (sourced).
#
#   source tests/cluster/slurm.sh
#   slurm_up 2            # munged, slurmctld and 2 slurmd's ("node1", "node2")
#   sbatch -N 2 ...       # SLURM_CONF points at our slurm.conf from here on
#   slurm_wait_job ID 300 # until the job has ended; prints its final state
#
# Everything lives under one temporary directory ($SLURM_TMP): the munge key
# and socket, slurm.conf, the controller's state, each node's spool, the PID
# files and logs. Nothing is written to /etc or /var, and no service manager
# is involved: the daemons are started here, and an EXIT trap stops them by
# the PIDs they wrote (and removes the directory unless CT_KEEP_SLURM=1).
#
# Each node is Debian's slurmd (built with multiple-slurmd support) started
# as `slurmd -N nodeI` with its own port, inside its own UTS namespace
# (`unshare --uts`) whose hostname is nodeI: the jobs' processes on that
# node see that host name, so Open MPI, PMIx and our placement see distinct
# hosts. All of them listen on 127.0.0.1 and Open MPI is told to use only
# the loopback interface, so no traffic leaves the machine.
#
# Needs root (munged, slurmd and slurmstepd), and Debian's munge, slurmctld,
# slurmd and slurm-client packages (launch/packages.txt).

SLURM_TMP=
_slurm_pidfiles=()

_slurm_log() { echo "slurm: $*" >&2; }

# Free TCP ports on 127.0.0.1, one per line.
_slurm_free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Stop every daemon we started (by its PID file), then remove the directory.
slurm_down() {
  local f pid i
  for f in "${_slurm_pidfiles[@]}"; do
    pid=$(cat "$f" 2>/dev/null) || continue
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for f in "${_slurm_pidfiles[@]}"; do
    pid=$(cat "$f" 2>/dev/null) || continue
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  done
  _slurm_pidfiles=()
  if [ -n "$SLURM_TMP" ] && [ "${CT_KEEP_SLURM:-0}" != 1 ]; then
    rm -rf "$SLURM_TMP"
  elif [ -n "$SLURM_TMP" ]; then
    _slurm_log "kept $SLURM_TMP"
  fi
  SLURM_TMP=
}

# _slurm_wait_pidfile FILE SECONDS: until the daemon has written its PID file.
_slurm_wait_pidfile() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

# slurm_up NODES [CPUS_PER_NODE]: start a cluster of NODES nodes (1..8),
# each claiming CPUS_PER_NODE CPUs (default 4: the test jobs oversubscribe
# this machine's cores on purpose). Exports SLURM_CONF and SLURM_TMP, and
# installs the EXIT trap (chained before an earlier one).
slurm_up() {
  local nodes=$1 cpus=${2:-4} i
  for cmd in munged slurmctld slurmd sbatch scontrol unshare python3; do
    command -v "$cmd" >/dev/null || { _slurm_log "$cmd not found (launch/setup.sh installs Slurm and munge)"; return 1; }
  done
  [ "$(id -u)" = 0 ] || { _slurm_log "needs root (munged, slurmd)"; return 1; }
  SLURM_TMP=$(mktemp -d /tmp/ct-slurm-XXXXXX)
  local prev_trap
  prev_trap=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
  # shellcheck disable=SC2064
  trap "slurm_down; $prev_trap" EXIT
  chmod 711 "$SLURM_TMP"
  mkdir -p "$SLURM_TMP/state" "$SLURM_TMP/spool" "$SLURM_TMP/log"

  # munge: our own key and socket.
  head -c 1024 /dev/urandom >"$SLURM_TMP/munge.key"
  chmod 400 "$SLURM_TMP/munge.key"
  munged --force --key-file="$SLURM_TMP/munge.key" --socket="$SLURM_TMP/munge.sock" \
    --pid-file="$SLURM_TMP/munged.pid" --log-file="$SLURM_TMP/log/munged.log" \
    --seed-file="$SLURM_TMP/munged.seed" || { _slurm_log "munged did not start"; return 1; }
  _slurm_pidfiles+=("$SLURM_TMP/munged.pid")
  _slurm_wait_pidfile "$SLURM_TMP/munged.pid" 10 || { _slurm_log "munged wrote no PID file"; return 1; }

  local ports
  mapfile -t ports < <(_slurm_free_ports $((nodes + 1)))
  local T=$SLURM_TMP
  cat >"$T/slurm.conf" <<EOF
# Written by tests/cluster/slurm.sh: a local test cluster under $T.
ClusterName=ctrain-test
SlurmctldHost=ctld(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: also how long a requeued job waits before it may start again
# (default 120 s); the tests requeue on purpose.
AuthInfo=socket=$T/munge.sock,cred_expire=5
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
# Node-local temporary space (PMIx puts its client directories there).
TmpFS=$T/tmp/%n
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd-%n.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$T/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$T/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# The main scheduling loop every 2 s (default 60): a requeued job starts again
# as soon as it is eligible.
SchedulerParameters=sched_interval=2
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
MinJobAge=3600
KillWait=5
InactiveLimit=0
SlurmctldTimeout=300
SlurmdTimeout=300
JobRequeue=1
EOF
  for ((i = 1; i <= nodes; i++)); do
    echo "NodeName=node$i NodeHostname=node$i NodeAddr=127.0.0.1 Port=${ports[i]} CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN" >>"$T/slurm.conf"
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$T/slurm.conf"
  : >"$T/plugstack.conf"
  export SLURM_CONF=$T/slurm.conf

  # The controller gets a UTS namespace too, so that its host name matches
  # SlurmctldHost whatever this machine is called.
  unshare --uts sh -c 'hostname ctld && exec slurmctld -i' || { _slurm_log "slurmctld did not start"; return 1; }
  _slurm_pidfiles+=("$T/slurmctld.pid")
  _slurm_wait_pidfile "$T/slurmctld.pid" 30 || { _slurm_log "slurmctld wrote no PID file; log:"; tail -20 "$T/log/slurmctld.log" >&2; return 1; }
  for ((i = 1; i <= nodes; i++)); do
    mkdir -p "$T/spool/node$i" "$T/tmp/node$i"
    unshare --uts sh -c "hostname node$i && exec slurmd -N node$i" || { _slurm_log "slurmd node$i did not start"; return 1; }
    _slurm_pidfiles+=("$T/slurmd-node$i.pid")
  done
  for ((i = 1; i <= nodes; i++)); do
    _slurm_wait_pidfile "$T/slurmd-node$i.pid" 30 || { _slurm_log "slurmd node$i wrote no PID file; log:"; tail -20 "$T/log/slurmd-node$i.log" >&2; return 1; }
  done
  # Until every node is idle.
  local idle
  for ((i = 0; i < 600; i++)); do
    idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq "$nodes" ] && break
    sleep 0.1
  done
  [ "$idle" -eq "$nodes" ] || { _slurm_log "only $idle of $nodes nodes came up"; sinfo -N >&2; return 1; }
  # Open MPI inside the jobs: loopback only (see above); the tests run as root.
  export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
  # MPICH's hydra likewise (its proxies cannot resolve the node names).
  export HYDRA_IFACE=lo
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  _slurm_log "$nodes node(s) up under $T"
}

# slurm_job_field JOB FIELD: one field (JobState, ExitCode, Restarts, ...) of
# `scontrol show job`.
slurm_job_field() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

# slurm_state_final STATE: STATE is a final job state: the job will not run
# again (COMPLETING has passed; a requeued job goes through PENDING again).
slurm_state_final() {
  case "$1" in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;;
  esac
  return 1
}

# slurm_wait_job JOB SECONDS: until JOB is in a final state (not pending,
# running, requeued, completing, ...); prints the state. Fails on timeout
# (and cancels the job).
slurm_wait_job() {
  local job=$1 limit=$2 state i
  for ((i = 0; i < limit * 5; i++)); do
    state=$(slurm_job_field "$job" JobState)
    if slurm_state_final "$state"; then
      echo "$state"
      return 0
    fi
    sleep 0.2
  done
  echo "TIMEOUT_WAITING($state)"
  scancel "$job" 2>/dev/null || true
  return 1
}

# slurm_wait_state JOB STATE SECONDS: until JOB is in STATE; fails at once
# when the job reaches another final state.
slurm_wait_state() {
  local i state
  for ((i = 0; i < $3 * 5; i++)); do
    state=$(slurm_job_field "$1" JobState)
    [ "$state" = "$2" ] && return 0
    slurm_state_final "$state" && return 1
    sleep 0.2
  done
  return 1
}
