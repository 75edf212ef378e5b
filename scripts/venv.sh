#!/usr/bin/env bash
# venv.sh -- makes the project-local Python virtualenv .venv and installs the
# pinned packages of the given requirements files (default:
# python/requirements.txt) into it.
#
# Reinstalls only when the requirements change: a stamp file in the venv
# holds a hash of the requirement files and of the interpreter; when it
# matches, nothing runs (no network). A venv whose interpreter is gone (the
# python it was made from was removed or moved) is made anew.
#
#   scripts/venv.sh [requirements.txt ...]
#   PYTHON=python3.11 scripts/venv.sh      # the interpreter to make it from
#   VENV=.venv                             # where (relative to the repo)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
if [ $# -eq 0 ]; then set -- python/requirements.txt; fi

if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "venv: '$PYTHON' not found on PATH (set PYTHON=...)" >&2
    exit 1
  fi
  echo "venv: creating $VENV with $("$PYTHON" --version 2>&1) ($(command -v "$PYTHON"))"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.fsh-requirements.stamp"
want=$( { "$VENV/bin/python" -c 'import sys; print(sys.version)'; for f in "$@"; do echo "== $f"; cat "$f"; done; } | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "venv: $VENV up to date ($*)"
  exit 0
fi

echo "venv: installing $* into $VENV"
reqs=()
for f in "$@"; do reqs+=(-r "$f"); done
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
  "$VENV/bin/python" -m pip install --quiet --require-virtualenv "${reqs[@]}"
echo "$want" > "$stamp"
