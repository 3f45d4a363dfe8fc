#!/usr/bin/env bash
# End-to-end test of deploy/slurm/sluice.sbatch on a real one-machine Slurm cluster (CTest labels
# `deploy` and `slurm`).
#
# Brings up munged, slurmctld and slurmd on localhost from Debian's slurm-wlm and munge (every
# file in a fresh temporary directory, every daemon on free ports and stopped at the end), submits
# the sbatch script with `sbatch --wait`: a coordinator, two input workers and two trainer tasks
# reading range(N).batch(B) with the DATA policy, each trainer's consumer index and count taken
# from SLURM_PROCID/SLURM_NTASKS through the cluster spec. Then checks that every element of the
# dataset arrived exactly once across the two trainers' outputs, and that each trainer took its
# own index from Slurm.
#
# Needs root (slurmd runs jobs as their user; the daemons run as root here). When slurm-wlm or
# munge is missing it installs them with apt-get (bounded in time) if it can. When it cannot run,
# it prints "SKIP: <reason>" and exits 77 (CTest's SKIP_RETURN_CODE for this test); under
# CI=true missing packages (which scripts/test.sh installs) fail instead.
#
# Environment: SLUICE_BUILD_DIR (default build); SLUICE_SLURM_KEEP=1 keeps the temporary
# directory for debugging.
set -uo pipefail

SKIP=77
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${SLUICE_BUILD_DIR:-$REPO/build}
BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "FAIL: no $BUILD/bin (build first)" >&2; exit 1; }
NUM_ELEMENTS=60
BATCH=6

skip() { echo "SKIP: $*"; exit "$SKIP"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

for b in sluice-coordinator sluice-worker sluicectl; do
  [[ -x "$BIN/$b" ]] || fail "$BIN/$b not built"
done
[[ $(id -u) -eq 0 ]] || skip "needs root to run slurmctld/slurmd/munged (running as uid $(id -u))"

have_slurm() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
    command -v munged >/dev/null && command -v sbatch >/dev/null
}
if ! have_slurm; then
  if command -v apt-get >/dev/null; then
    echo "slurm_e2e: installing slurm-wlm and munge with apt-get (at most 240s)"
    export DEBIAN_FRONTEND=noninteractive
    timeout 240 bash -c 'apt-get install -y -qq --no-install-recommends slurm-wlm munge ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge; }' \
      >/tmp/sluice-slurm-apt.$$.log 2>&1
    rm -f /tmp/sluice-slurm-apt.$$.log
  fi
  if ! have_slurm; then
    # scripts/test.sh installs them: under CI=true their absence is a failure, not a skip.
    case "${CI:-}" in
      [Tt][Rr][Uu][Ee] | 1 | [Yy][Ee][Ss])
        fail "slurm-wlm and munge are not installed and could not be installed (CI=true)" ;;
    esac
    skip "slurm-wlm and munge are not installed and could not be installed" \
         "(apt-get install slurm-wlm munge)"
  fi
fi
command -v python3 >/dev/null || skip "python3 is needed to pick free ports and parse outputs"

TMP=$(mktemp -d /tmp/sluice-slurm.XXXXXX)
chmod 755 "$TMP"
DAEMON_PIDS=()
cleanup() {
  local status=$? pid i
  trap - EXIT INT TERM
  if [[ -n "${SLURM_CONF:-}" ]] && command -v scancel >/dev/null; then
    timeout 10 scancel --full --quiet --user=root 2>/dev/null
  fi
  # Stop the daemons in reverse start order: SIGTERM, then SIGKILL after 10s.
  for (( i = ${#DAEMON_PIDS[@]} - 1; i >= 0; i-- )); do
    pid=${DAEMON_PIDS[i]}
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [[ "${SLUICE_SLURM_KEEP:-0}" == 1 ]]; then
    echo "slurm_e2e: kept $TMP"
  else
    rm -rf "$TMP"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- munge --------------------------------------------------------------------------------------
dd if=/dev/urandom of="$TMP/munge.key" bs=1024 count=1 status=none
chmod 400 "$TMP/munge.key"
mkdir -m 700 "$TMP/munge"
munged --foreground --force --key-file="$TMP/munge.key" --socket="$TMP/munge/munge.socket" \
  --pid-file="$TMP/munge/munged.pid" --log-file="$TMP/munge/munged.log" \
  --seed-file="$TMP/munge/munged.seed" >"$TMP/munged.out" 2>&1 &
DAEMON_PIDS+=($!)
for _ in $(seq 100); do [[ -S "$TMP/munge/munge.socket" ]] && break; sleep 0.1; done
[[ -S "$TMP/munge/munge.socket" ]] ||
  skip "munged did not start: $(tail -n 3 "$TMP/munged.out" "$TMP/munge/munged.log" 2>/dev/null | tr '\n' ' ')"

# --- slurm.conf for localhost ---------------------------------------------------------------------
CPUS=$(nproc)
(( CPUS >= 2 )) || CPUS=2
mkdir -p "$TMP/state" "$TMP/spool" "$TMP/run"
export SLURM_CONF="$TMP/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=sluicetest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$TMP/munge/munge.socket
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=100 State=UNKNOWN
PartitionName=sluice Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -D -i -f "$SLURM_CONF" >"$TMP/slurmctld.out" 2>&1 &
DAEMON_PIDS+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$TMP/slurmd.out" 2>&1 &
DAEMON_PIDS+=($!)

daemon_logs() {
  local f
  for f in "$TMP"/slurmctld.out "$TMP"/slurmctld.log "$TMP"/slurmd.out "$TMP"/slurmd.log; do
    [[ -f "$f" ]] && { echo "--- $f"; tail -n 15 "$f"; }
  done
}

# Wait (at most 60s) until the node is idle.
state=""
for _ in $(seq 120); do
  for pid in "${DAEMON_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null || { daemon_logs; skip "a Slurm daemon exited at start-up (logs above)"; }
  done
  state=$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null | head -n 1)
  [[ "$state" == idle ]] && break
  sleep 0.5
done
if [[ "$state" != idle ]]; then
  daemon_logs
  skip "the Slurm node did not become idle within 60s (state '${state}'; logs above)"
fi
echo "slurm_e2e: slurmctld and slurmd up on localhost ($CPUS CPUs); submitting the job"

# --- the job ------------------------------------------------------------------------------------
RUN="$TMP/run"
export SLUICE_BIN_DIR="$BIN" SLUICE_RUN_DIR="$RUN" SLUICE_COORDINATOR_PORT=$(free_port)
export SLUICE_WORKER_HOST=127.0.0.1 SLUICE_WORKERS_PER_NODE=2 SLUICE_START_TIMEOUT=60
export SLUICE_PIPELINE="range($NUM_ELEMENTS).batch($BATCH)" SLUICE_DEVICES=CPU:0
export SLUICE_JOB_NAME=slurm-e2e SLUICE_SHARDING_POLICY=DATA
# Nothing of the caller's cluster configuration may leak into the trainers.
unset TF_CONFIG SLUICE_CLUSTER SLUICE_CONSUMER_INDEX SLUICE_NUM_CONSUMERS JOB_COMPLETION_INDEX
job_status=0
timeout 300 sbatch --wait --quiet --nodes=1 --ntasks=2 --time=5 --export=ALL \
  --chdir="$TMP" --output="$TMP/job.out" "$REPO/deploy/slurm/sluice.sbatch" || job_status=$?
if (( job_status != 0 )); then
  echo "--- job output"; cat "$TMP/job.out" 2>/dev/null
  for f in "$RUN"/*; do [[ -f "$f" ]] && { echo "--- $f"; tail -n 20 "$f"; }; done
  daemon_logs
  fail "sbatch --wait exited with status $job_status"
fi
echo "slurm_e2e: job finished; checking the trainers' outputs"

# Every element exactly once across the trainers; each trainer its own Slurm rank.
python3 - "$RUN" "$NUM_ELEMENTS" <<'EOF' || fail "the trainers' outputs are wrong (above)"
import glob, json, os, re, sys
run, n = sys.argv[1], int(sys.argv[2])
outs = sorted(glob.glob(os.path.join(run, "trainer-*.out")))
if len(outs) != 2:
    sys.exit(f"expected 2 trainer outputs in {run}, found {outs}")
def flat(v):
    return [x for e in v for x in flat(e)] if isinstance(v, list) else [v]
def ints(step):  # {"step": S, "per_replica": [{"dtype", "shape", "values"}, ...]}, or
    # {"step": S, "value": {...}}: one device on one worker, which TF does not wrap
    replicas = step["per_replica"] if "per_replica" in step else [step["value"]]
    return [x for r in replicas for x in flat(r["values"])]
seen, per_trainer = [], []
for path in outs:
    got = []
    for line in open(path):
        line = line.strip()
        if line:
            got.extend(ints(json.loads(line)))
    per_trainer.append(len(got))
    seen.extend(got)
if sorted(seen) != list(range(n)):
    missing = sorted(set(range(n)) - set(seen))
    dup = sorted({x for x in seen if seen.count(x) > 1})
    sys.exit(f"elements: {len(seen)} values, missing {missing}, duplicated {dup}")
if min(per_trainer) == 0:
    sys.exit(f"a trainer received nothing: {per_trainer}")
ranks = set()
for path in sorted(glob.glob(os.path.join(run, "trainer-*.err"))):
    m = re.search(r"trainer (\d+) \(SLURM_PROCID/SLURM_NTASKS\) of 2", open(path).read())
    if not m:
        sys.exit(f"{path}: no 'trainer I (SLURM_PROCID/SLURM_NTASKS) of 2' line")
    ranks.add(int(m.group(1)))
if ranks != {0, 1}:
    sys.exit(f"consumer indexes from Slurm: {sorted(ranks)}, want [0, 1]")
print(f"slurm_e2e: {n} elements exactly once over 2 trainers ({per_trainer}); ranks {sorted(ranks)}")
EOF
echo "PASS"
