#!/usr/bin/env bash
# Starts a Sluice cluster on loopback: one sluice-coordinator and N sluice-worker processes, each
# on a free port (--port=0, the bound port read back from --port_file).
#
# Run it:
#   deploy/local/start_local_cluster.sh [NUM_WORKERS]                # until Ctrl-C
#   deploy/local/start_local_cluster.sh [NUM_WORKERS] -- COMMAND...  # runs COMMAND, then stops
# COMMAND sees SLUICE_COORDINATOR=127.0.0.1:PORT, e.g.
#   deploy/local/start_local_cluster.sh 2 -- \
#     sh -c 'build/bin/sluicectl status --coordinator=$SLUICE_COORDINATOR'
#
# Or source it (scripts/quickstart.sh does) and call:
#   sluice_cluster_start NUM_WORKERS   # sets SLUICE_COORDINATOR; installs the cleanup trap
#   sluice_cluster_stop                # SIGTERM to every process, waits, checks each exited 0
#   sluice_cluster_track PID           # a client process of the caller's (a trainer, sluicectl)
#                                      # that the trap also kills if it still runs at exit
#
# Environment: SLUICE_BIN_DIR (default build/bin), SLUICE_CLUSTER_DIR (logs and port files;
# default a fresh temporary directory), SLUICE_WORKER_TIMEOUT (coordinator --worker_timeout,
# default 10s), SLUICE_HEARTBEAT_INTERVAL (workers' --heartbeat_interval, default 1s),
# SLUICE_START_TIMEOUT (seconds to wait for the port files, default 30), SLUICE_DATA_ROOT (the
# servers' --data_root; default unset: any local file, and public addresses only for remote
# reads, so a local HTTP or S3 server needs its endpoint here, e.g. /data,http://127.0.0.1:9000/).
#
# No process is left behind: an EXIT/INT/TERM trap kills whatever is still running (SIGTERM, then
# SIGKILL after a grace period), also when a step of the calling script fails.

SLUICE_CLUSTER_PIDS=()
SLUICE_CLUSTER_NAMES=()
SLUICE_CLUSTER_CLIENT_PIDS=()
SLUICE_COORDINATOR=""

# Prints the last lines of every process log (after a failure).
sluice_cluster_logs() {
  local f
  for f in "${SLUICE_CLUSTER_DIR}"/*.log; do
    [[ -f "$f" ]] || continue
    echo "--- ${f##*/} (last lines)" >&2
    tail -n 15 "$f" >&2
  done
}

# Waits up to $2 seconds for the file $1 to hold a port, then prints it. The process $3 must stay
# alive meanwhile.
sluice_cluster_wait_port() {
  local file=$1 timeout=$2 pid=$3 waited=0
  while [[ ! -s "$file" ]]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "start_local_cluster: process $pid exited before writing $file" >&2
      return 1
    fi
    if (( waited >= timeout * 10 )); then
      echo "start_local_cluster: no port in $file after ${timeout}s" >&2
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  tr -d '[:space:]' <"$file"
}

# SIGTERM to every process still running (workers first, so that they drain while the
# coordinator still answers), waits up to $1 seconds each (default 20), then SIGKILL. Returns 1
# if any process did not exit 0. Safe to call twice.
sluice_cluster_stop() {
  local grace=${1:-20} rc=0 i pid name status waited
  for (( i = ${#SLUICE_CLUSTER_PIDS[@]} - 1; i >= 0; i-- )); do
    pid=${SLUICE_CLUSTER_PIDS[i]}
    name=${SLUICE_CLUSTER_NAMES[i]}
    [[ -n "$pid" ]] || continue
    kill -TERM "$pid" 2>/dev/null
    waited=0
    while kill -0 "$pid" 2>/dev/null && (( waited < grace * 10 )); do
      sleep 0.1
      waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "start_local_cluster: ${name} (pid ${pid}) still running ${grace}s after SIGTERM; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
    status=0
    wait "$pid" 2>/dev/null || status=$?
    if (( status == 0 )); then
      echo "start_local_cluster: ${name} (pid ${pid}) exited 0" >&2
    else
      echo "start_local_cluster: ${name} (pid ${pid}) exited with status ${status}" >&2
      rc=1
    fi
    SLUICE_CLUSTER_PIDS[i]=""
  done
  return $rc
}

sluice_cluster_track() {
  SLUICE_CLUSTER_CLIENT_PIDS+=("$@")
}

# The trap: stop whatever still runs (clients first); keep the exit status of the script.
sluice_cluster_cleanup() {
  local status=$? pid
  trap - EXIT INT TERM
  for pid in "${SLUICE_CLUSTER_CLIENT_PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  if (( ${#SLUICE_CLUSTER_PIDS[@]} )); then
    sluice_cluster_stop 5 || true
  fi
  exit "$status"
}

# Starts the coordinator and $1 workers (default 2); sets SLUICE_COORDINATOR. Returns 1 (after
# stopping what it started and printing the logs) when a process does not come up.
sluice_cluster_start() {
  local num_workers=${1:-2}
  local bin=${SLUICE_BIN_DIR:-build/bin}
  local timeout=${SLUICE_START_TIMEOUT:-30}
  local i port pid
  if [[ -z "${SLUICE_CLUSTER_DIR:-}" ]]; then
    SLUICE_CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cluster.XXXXXX")
  fi
  mkdir -p "$SLUICE_CLUSTER_DIR"
  rm -f "$SLUICE_CLUSTER_DIR"/*.port
  for b in sluice-coordinator sluice-worker; do
    if [[ ! -x "$bin/$b" ]]; then
      echo "start_local_cluster: $bin/$b not found (build first, or set SLUICE_BIN_DIR)" >&2
      return 1
    fi
  done
  trap sluice_cluster_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local roots=()
  if [[ -n "${SLUICE_DATA_ROOT:-}" ]]; then roots=(--data_root="$SLUICE_DATA_ROOT"); fi

  "$bin/sluice-coordinator" --port=0 --port_file="$SLUICE_CLUSTER_DIR/coordinator.port" \
    --worker_timeout="${SLUICE_WORKER_TIMEOUT:-10s}" "${roots[@]}" \
    2>"$SLUICE_CLUSTER_DIR/coordinator.log" &
  pid=$!
  SLUICE_CLUSTER_PIDS+=("$pid")
  SLUICE_CLUSTER_NAMES+=("sluice-coordinator")
  if ! port=$(sluice_cluster_wait_port "$SLUICE_CLUSTER_DIR/coordinator.port" "$timeout" "$pid"); then
    sluice_cluster_logs
    sluice_cluster_stop 5 || true
    return 1
  fi
  SLUICE_COORDINATOR="127.0.0.1:${port}"
  export SLUICE_COORDINATOR
  echo "start_local_cluster: sluice-coordinator (pid ${pid}) serving on ${SLUICE_COORDINATOR}" >&2

  for (( i = 0; i < num_workers; i++ )); do
    "$bin/sluice-worker" --coordinator="$SLUICE_COORDINATOR" --port=0 \
      --port_file="$SLUICE_CLUSTER_DIR/worker-$i.port" \
      --heartbeat_interval="${SLUICE_HEARTBEAT_INTERVAL:-1s}" --drain_timeout=5s "${roots[@]}" \
      2>"$SLUICE_CLUSTER_DIR/worker-$i.log" &
    SLUICE_CLUSTER_PIDS+=("$!")
    SLUICE_CLUSTER_NAMES+=("sluice-worker $i")
  done
  for (( i = 0; i < num_workers; i++ )); do
    pid=${SLUICE_CLUSTER_PIDS[i + 1]}
    if ! port=$(sluice_cluster_wait_port "$SLUICE_CLUSTER_DIR/worker-$i.port" "$timeout" "$pid"); then
      sluice_cluster_logs
      sluice_cluster_stop 5 || true
      return 1
    fi
    echo "start_local_cluster: sluice-worker $i (pid ${pid}) serving on 127.0.0.1:${port}" >&2
  done
  # A job made now gets one task per worker: wait until every worker has heartbeated.
  local waited=0
  while true; do
    local alive
    alive=$("$bin/sluicectl" status --coordinator="$SLUICE_COORDINATOR" --format=json \
              --retry_deadline=2s 2>/dev/null | grep -o '"alive": true' | wc -l)
    (( alive >= num_workers )) && break
    if (( waited >= timeout * 10 )); then
      echo "start_local_cluster: only ${alive} of ${num_workers} workers registered after ${timeout}s" >&2
      sluice_cluster_logs
      sluice_cluster_stop 5 || true
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  echo "start_local_cluster: ${num_workers} worker(s) registered; logs in ${SLUICE_CLUSTER_DIR}" >&2
}

# Executed (not sourced): start, then run the command after `--` or wait for a signal.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -uo pipefail
  num_workers=2
  if [[ $# -gt 0 && "$1" != "--" ]]; then
    num_workers=$1
    shift
  fi
  [[ $# -gt 0 && "$1" == "--" ]] && shift
  sluice_cluster_start "$num_workers" || exit 1
  if [[ $# -gt 0 ]]; then
    "$@"
    command_status=$?
    sluice_cluster_stop || command_status=1
    trap - EXIT INT TERM
    exit "$command_status"
  fi
  echo "start_local_cluster: coordinator at ${SLUICE_COORDINATOR}; Ctrl-C stops the cluster" >&2
  echo "  e.g. ${SLUICE_BIN_DIR:-build/bin}/sluicectl status --coordinator=${SLUICE_COORDINATOR}" >&2
  # Wait for a signal (the INT/TERM traps exit, and the EXIT trap stops the cluster).
  while true; do sleep 1; done
fi
