# Sourced by run_with_worker.sh and run_cluster.sh: the processes they start, stopped
# together on exit, Ctrl-C or TERM (so no server or worker outlives its script).
pids=()
stop() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT TERM
