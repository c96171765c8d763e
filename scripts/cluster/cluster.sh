#!/usr/bin/env bash
# An emulated cluster on one machine: N "nodes", each a network namespace with its own hostname
# (node1..nodeN) on a bridge, running a real Slurm (munged + slurmctld + one slurmd per node), with
# optional link shaping (tc tbf: rate limits; this kernel has no netem, so no added latency).
#
#   scripts/cluster/cluster.sh up N [--cpus C] [--gpus G] [--mem MB] [--rate RATE]
#   scripts/cluster/cluster.sh shape RATE|off      e.g. 1gbit, 100mbit
#   scripts/cluster/cluster.sh env                 print the environment MPI jobs need (eval it)
#   scripts/cluster/cluster.sh mpirun ARGS...      mpirun across the nodes without Slurm (as node1)
#   scripts/cluster/cluster.sh status | down
#
# Jobs: `eval "$(scripts/cluster/cluster.sh env)"; sbatch --wait job.sbatch` (sbatch exports the
# submitting environment). PBS scripts go through sbatch's #PBS handling; PBS_* variables come from
# spank_pbs and PBS_NODEFILE from generate_pbs_nodefile (slurm-wlm-torque).
# Needs root, iproute2, and Debian's slurm-wlm, slurmctld, slurmd, munge, slurm-wlm-torque.
set -euo pipefail

ST=${HPDT_CLUSTER_DIR:-/tmp/hpdt-cluster}
# Network namespaces, the bridge, /etc/hosts and /etc/slurm are machine-wide, so one cluster per
# machine; this file names its owner ("PID STATE_DIR": the process that ran `up`, by default the shell
# or script calling cluster.sh) so that a cluster left behind by a killed run can be told from a live one.
OWNER=/run/hpdt-cluster.owner
BR=hpdtbr0
NET=10.10.0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "cluster.sh: $*" >&2; exit 1; }
nodes() { cat "$ST/nodes" 2>/dev/null || echo 0; }

need() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, slurmd)"
  for c in ip nsenter unshare slurmctld slurmd munged sbatch tc; do
    command -v $c >/dev/null || die "missing '$c': apt-get install slurm-wlm slurmctld slurmd slurm-client munge slurm-wlm-torque iproute2"
  done
}

shape() {  # rate|off on every node link, both directions
  local rate=$1 n; n=$(nodes)
  for i in $(seq 1 "$n"); do
    tc qdisc del dev hpdtv$i root 2>/dev/null || true
    nsenter --net=/run/netns/hpdt-node$i tc qdisc del dev eth0 root 2>/dev/null || true
    if [ "$rate" != off ]; then
      # burst must cover a GSO super-packet (~64 KiB on veth)
      tc qdisc add dev hpdtv$i root tbf rate "$rate" burst 256kb latency 50ms
      nsenter --net=/run/netns/hpdt-node$i tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
    fi
  done
  echo "$rate" > "$ST/rate"
}

up() {
  local n=${1:-}; shift || true
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "up needs a node count 1..64, got '${n}'"
  local cpus=2 gpus=0 mem=4000 rate=off
  while [ $# -gt 0 ]; do
    case "$1" in
      --cpus) cpus=$2; shift 2 ;; --gpus) gpus=$2; shift 2 ;; --mem) mem=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;; *) die "unknown option $1" ;;
    esac
  done
  need
  reclaim_stale
  [ -e "$ST/nodes" ] && die "a cluster is already up ($ST); run 'cluster.sh down' first"
  trap 'echo "cluster.sh: up failed; tearing down what was started" >&2; down >/dev/null 2>&1' ERR
  mkdir -p "$ST"/{ctld,log,run,dev} /run/munge
  echo "$n" > "$ST/nodes"
  echo "${HPDT_CLUSTER_OWNER_PID:-$PPID} $ST" > "$OWNER"

  # network: bridge in the root namespace (.254), node i at .i with its own namespace
  ip link add $BR type bridge && ip addr add $NET.254/24 dev $BR && ip link set $BR up
  for i in $(seq 1 "$n"); do
    ip netns add hpdt-node$i
    ip link add hpdtv$i type veth peer name eth0 netns hpdt-node$i
    ip link set hpdtv$i master $BR up
    ip -n hpdt-node$i addr add $NET.$i/24 dev eth0
    ip -n hpdt-node$i link set eth0 up
    ip -n hpdt-node$i link set lo up
    grep -q " node$i\$" /etc/hosts || echo "$NET.$i node$i" >> /etc/hosts
    mkdir -p "$ST/spool/node$i" "$ST/tmpfs/node$i"
  done
  [ "$rate" != off ] && shape "$rate"

  # munge: authentication shared by all nodes through its socket in /run/munge
  chown munge:munge /run/munge; chmod 755 /run/munge
  [ -f /etc/munge/munge.key ] || die "no /etc/munge/munge.key (reinstall munge)"
  if ! munge -n >/dev/null 2>&1; then  # reuse a munged that already answers
    # the pid file lives in munge's own directory: munged runs as user munge and cannot
    # traverse a private (0700) state directory such as one made by mktemp
    runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/hpdt-munged.pid
    touch "$ST/run/munged.ours"
  fi
  for _ in $(seq 1 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n >/dev/null 2>&1 || die "munged does not answer"

  # fake GPUs for GRES bookkeeping (must be character devices)
  local gres_node="" gres_types=""
  if [ "$gpus" -gt 0 ]; then
    for g in $(seq 0 $((gpus - 1))); do [ -e "$ST/dev/nvidia$g" ] || mknod "$ST/dev/nvidia$g" c 1 3; done
    printf 'AutoDetect=off\nNodeName=node[1-%s] Name=gpu File=%s/dev/nvidia[0-%s]\n' "$n" "$ST" $((gpus - 1)) > /etc/slurm/gres.conf
    gres_node="Gres=gpu:$gpus"; gres_types="GresTypes=gpu"
  fi
  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=hpdt
SlurmctldHost=$(hostname -s)($NET.254)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$ST/ctld
SlurmdSpoolDir=$ST/spool/%n
TmpFS=$ST/tmpfs/%n
SlurmctldPidFile=$ST/run/slurmctld.pid
SlurmdPidFile=$ST/run/slurmd-%n.pid
SlurmctldLogFile=$ST/log/slurmctld.log
SlurmdLogFile=$ST/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
KillWait=5
$gres_types
NodeName=node[1-$n] NodeAddr=$NET.[1-$n] CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem $gres_node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  mkdir -p /etc/slurm/plugstack.conf.d
  echo "optional /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pbs.so" > /etc/slurm/plugstack.conf.d/pbs.conf
  /usr/sbin/slurmctld
  for i in $(seq 1 "$n"); do
    # nsenter --net, not `ip netns exec` (which remounts /sys and breaks slurmd's cgroup probe);
    # unshare --uts gives the node its hostname, which Open MPI uses to name shared-memory segments.
    nsenter --net=/run/netns/hpdt-node$i unshare --uts /bin/sh -c "hostname node$i; exec /usr/sbin/slurmd -N node$i"
  done
  for _ in $(seq 1 150); do
    [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -ge "$n" ] && break
    sleep 0.2
  done
  [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge "$n" ] || { sinfo -N; die "nodes did not come up (logs in $ST/log)"; }
  sinfo -N -o '%N %T %c %G'
  trap - ERR
  echo "cluster up: $n node(s) x $cpus CPUs, $gpus fake GPU(s) per node, links: $rate. Next: eval \"\$(scripts/cluster/cluster.sh env)\""
}

env_lines() {
  cat <<ENV
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_tcp_if_include=$NET.0/24 OMPI_MCA_oob_tcp_if_include=$NET.0/24
export OMPI_MCA_mpi_yield_when_idle=1
ENV
}

cluster_mpirun() {  # mpirun across the namespaces, as if launched on node1 (no Slurm involved)
  local n; n=$(nodes)
  [ "$n" -ge 1 ] || die "no cluster is up"
  local hostfile=$ST/hosts.txt agent=$ST/nsrsh
  : > "$hostfile"
  for i in $(seq 1 "$n"); do echo "node$i slots=${HPDT_CLUSTER_SLOTS:-2}" >> "$hostfile"; done
  cat > "$agent" <<'AGENT'
#!/bin/bash
# plm_rsh_agent: Open MPI calls `agent [ssh options] host command...`; run it in that node's namespace.
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
exec nsenter --net=/run/netns/hpdt-${host%%.*} unshare --uts /bin/sh -c "hostname ${host%%.*}; exec $*"
AGENT
  chmod +x "$agent"
  eval "$(env_lines)"
  exec nsenter --net=/run/netns/hpdt-node1 unshare --uts /bin/bash -c \
    "hostname node1; exec mpirun --mca plm_rsh_agent $agent --mca plm_rsh_no_tree_spawn 1 --hostfile $hostfile $(printf '%q ' "$@")"
}

stop_pid() {  # kill and wait (up to 10 s) for the process in pid file $1
  [ -f "$1" ] || return 0
  local pid; pid=$(cat "$1")
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

leftovers() {  # does anything of an emulated cluster exist on this machine?
  compgen -G "/run/netns/hpdt-node*" >/dev/null || ip link show $BR >/dev/null 2>&1 || [ -f "$OWNER" ]
}

reclaim_stale() {
  # A run killed before its `down` (SIGKILL, a lost session) leaves namespaces, the bridge and maybe
  # slurm daemons behind, and the next `up` would fail on "File exists". Remove them when the owner
  # recorded in $OWNER is gone; refuse (naming it) when it is still alive.
  leftovers || return 0
  local pid="" old=""
  [ -f "$OWNER" ] && read -r pid old < "$OWNER"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    die "an emulated cluster is already up, owned by process $pid (state in $old); run 'HPDT_CLUSTER_DIR=$old $0 down' first"
  fi
  echo "cluster.sh: removing an emulated cluster left behind by a dead process ${pid:-?} (state ${old:-unknown})" >&2
  # its slurmctld, also when its state directory (and pid file) is gone
  grep -qs "^ClusterName=hpdt$" /etc/slurm/slurm.conf && pkill -x slurmctld 2>/dev/null || true
  teardown "$old"
  rm -f "$OWNER"
  [ -n "$old" ] && rm -f "$old/nodes"  # its logs stay for a look; the directory is no longer "up"
  leftovers && die "could not remove the stale cluster (ip netns list; ip link show $BR)"
  return 0
}

teardown() {  # teardown STATE_DIR: the daemons started from STATE_DIR (may be empty), then every node and the config
  local dir=$1 ns
  if [ -n "$dir" ]; then
    for f in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid"; do stop_pid "$f"; done
    [ -f "$dir/run/munged.ours" ] && stop_pid /run/munge/hpdt-munged.pid
  fi
  pkill -f "slurmd -N node" 2>/dev/null || true
  for ns in /run/netns/hpdt-node*; do
    [ -e "$ns" ] || continue
    ip netns del "${ns##*/}" 2>/dev/null || true
    ip link del "hpdtv${ns##*hpdt-node}" 2>/dev/null || true
    rm -rf "/dev/shm/ci-${ns##*hpdt-}"
  done
  ip link del $BR 2>/dev/null || true
  sed -i "/^${NET//./\\.}\.[0-9]* node[0-9]*\$/d" /etc/hosts
  rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/plugstack.conf.d/pbs.conf
}

down() {
  teardown "$ST"
  rm -rf "$ST"
  if [ -f "$OWNER" ]; then
    local pid old; read -r pid old < "$OWNER"; [ "$old" = "$ST" ] && rm -f "$OWNER"
  fi
  echo "cluster down"
}

status() {
  [ -f "$ST/nodes" ] || { echo "no cluster up"; return 1; }
  echo "nodes: $(nodes), links: $(cat "$ST/rate" 2>/dev/null || echo off)"
  sinfo -N -o '%N %T %c %G'
  squeue
}

cmd=${1:-}; shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  shape) need; [ $# -eq 1 ] || die "shape needs RATE (e.g. 1gbit) or off"; shape "$1"; echo "links: $1" ;;
  env) env_lines ;;
  mpirun) cluster_mpirun "$@" ;;
  status) status ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
