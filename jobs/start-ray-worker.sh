#!/usr/bin/env bash
# Join a Ray cluster as a worker node: `jobs/start-ray-worker.sh --address=<head host:port> [ray start options]`.
#
# Uses the head's token authentication (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH: the same token file, copied to
# this machine). Say what the node is for with custom resources, as the runtime places its actors by role under
# `runtime.placement=roles`, e.g.
#   jobs/start-ray-worker.sh --address=head:6379 --num-cpus=8 --resources='{"ehrbench_trials": 1000}'
#   jobs/start-ray-worker.sh --address=head:6379 --resources='{"ehrbench_data": 1000, "ehrbench_index": 1000}'
set -euo pipefail
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH="${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
unset RAY_AUTH_TOKEN
if [ ! -s "$RAY_AUTH_TOKEN_PATH" ]; then
  echo "start-ray-worker: no token at $RAY_AUTH_TOKEN_PATH (copy the head's)" >&2
  exit 2
fi
exec ray start --disable-usage-stats "$@"
