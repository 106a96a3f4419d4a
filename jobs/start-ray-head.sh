#!/usr/bin/env bash
# Start a Ray head node with token authentication, from nothing: `jobs/start-ray-head.sh [ray start options]`.
#
# Ray 2.60 turns token authentication on only when RAY_AUTH_MODE=token, and then refuses to start without a token;
# a plain `ray start --head` on a fresh machine runs with authentication off. This script makes a token when there is
# none (at $RAY_AUTH_TOKEN_PATH, default ~/.ray/auth_token, readable by you only) and starts the head with it.
# Clients (ray.init, `ray job submit`, `python -m ehrbench runtime=cluster`) need the same two variables:
#   export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=~/.ray/auth_token
set -euo pipefail
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH="${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
unset RAY_AUTH_TOKEN   # it would win over the file
if [ ! -s "$RAY_AUTH_TOKEN_PATH" ]; then
  mkdir -p "$(dirname "$RAY_AUTH_TOKEN_PATH")"
  (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' > "$RAY_AUTH_TOKEN_PATH")
  echo "start-ray-head: new token in $RAY_AUTH_TOKEN_PATH" >&2
fi
exec ray start --head --disable-usage-stats "$@"
