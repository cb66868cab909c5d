#!/usr/bin/env bash
# Run a command next to a throwaway PostgreSQL server and MLflow tracking server on 127.0.0.1, the services the
# multi-worker tests share a study through, then stop both and delete everything they wrote.
#
# Usage: .ci/with-services.sh COMMAND [ARG...]       e.g. .ci/with-services.sh make test
#
# The command sees
#   AUTOTUNE_TEST_PG_URL       postgresql+psycopg2://autotune:<random password>@127.0.0.1:<port>/autotune
#                              (a role that may create databases: the tests make one database per test)
#   AUTOTUNE_TEST_MLFLOW_URI   http://127.0.0.1:<port>
# and exits with the command's status. Both servers live in one temporary directory and listen on free ports, so
# this never touches a PostgreSQL cluster or MLflow server that was there before, and it stops only the two
# processes it started (by their ids), whatever way the command ends. PostgreSQL comes from Debian's package
# (.ci/install-postgres.sh installs it when missing); MLflow from $PYTHON (default .venv/bin/python).
# The password is random per run and never printed.
set -euo pipefail

if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-.venv/bin/python}"
if [[ ! -x "$PYTHON" ]]; then
    echo "with-services: no Python at $PYTHON: run 'make install' first, or set PYTHON=/path/to/venv/bin/python" >&2
    exit 2
fi

say() { echo "with-services: $*" >&2; }

bash "$HERE/install-postgres.sh" >&2
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/autotune-services.XXXXXX")"
chmod 755 "$WORK"
PG_STARTED=""
MLFLOW_PID=""

teardown() {
    local status=$?
    trap - EXIT INT TERM
    if [[ -n "$MLFLOW_PID" ]]; then
        # mlflow server runs in its own session: its uvicorn worker goes with it.
        kill -TERM -- "-$MLFLOW_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$MLFLOW_PID" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$MLFLOW_PID" 2>/dev/null || true
    fi
    if [[ -n "$PG_STARTED" ]]; then
        as_pg "$PG_BIN/pg_ctl" -D "$WORK/pg" -m fast -w -t 60 stop >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# PostgreSQL refuses to run as root: as root the cluster belongs to Debian's postgres user.
if [[ "$(id -u)" == 0 ]]; then
    PG_USER=postgres
    as_pg() { runuser -u postgres -- "$@"; }
else
    PG_USER="$(id -un)"
    as_pg() { "$@"; }
fi

# -- PostgreSQL: a fresh cluster in $WORK/pg, TCP on 127.0.0.1 only, passwords (scram) over TCP ---------------
PG_PORT="$(free_port)"
PG_PASSWORD="$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')"
mkdir -p "$WORK/pg" "$WORK/pgsock"
chown "$PG_USER" "$WORK/pg" "$WORK/pgsock"
as_pg "$PG_BIN/initdb" -D "$WORK/pg" -U "$PG_USER" -E UTF8 --locale=C --auth-local=peer --auth-host=scram-sha-256 \
    >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; exit 1; }
# fsync off: a throwaway cluster; losing it on a power cut loses nothing.
as_pg "$PG_BIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $WORK/pgsock -c fsync=off -c max_connections=200" start \
    >/dev/null || { cat "$WORK/pg/server.log" >&2; exit 1; }
PG_STARTED=1
printf 'CREATE ROLE autotune LOGIN CREATEDB PASSWORD %s;\nCREATE DATABASE autotune OWNER autotune;\n' \
    "'$PG_PASSWORD'" | as_pg "$PG_BIN/psql" -q -v ON_ERROR_STOP=1 -h "$WORK/pgsock" -p "$PG_PORT" -U "$PG_USER" \
    -d postgres >/dev/null
say "PostgreSQL $("$PG_BIN/postgres" --version | sed -E 's/^[^0-9]*([0-9.]+).*/\1/') on 127.0.0.1:$PG_PORT (database autotune)"

# -- MLflow tracking server: SQLite backend and artifacts in $WORK/mlflow --------------------------------------
ML_PORT="$(free_port)"
mkdir -p "$WORK/mlflow/artifacts"
# The background job runner is for GenAI jobs autotune never submits: eight more processes on a 2-core machine.
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false PYTHONWARNINGS=ignore::DeprecationWarning \
    setsid "$PYTHON" -m mlflow server --host 127.0.0.1 --port "$ML_PORT" --workers 1 \
    --backend-store-uri "sqlite:///$WORK/mlflow/mlflow.db" --artifacts-destination "$WORK/mlflow/artifacts" \
    --uvicorn-opts --no-access-log >"$WORK/mlflow/server.log" 2>&1 </dev/null &
MLFLOW_PID=$!
ML_URI="http://127.0.0.1:$ML_PORT"
ready=""
for _ in $(seq 300); do
    if ! kill -0 "$MLFLOW_PID" 2>/dev/null; then
        say "the MLflow server exited while starting; its log:"
        tail -n 40 "$WORK/mlflow/server.log" >&2
        exit 1
    fi
    if "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' \
        "$ML_URI" 2>/dev/null; then
        ready=1
        break
    fi
    sleep 0.5
done
if [[ -z "$ready" ]]; then
    say "the MLflow server did not answer $ML_URI/health within 150 s; its log:"
    tail -n 40 "$WORK/mlflow/server.log" >&2
    exit 1
fi
say "MLflow server at $ML_URI"

export AUTOTUNE_TEST_PG_URL="postgresql+psycopg2://autotune:$PG_PASSWORD@127.0.0.1:$PG_PORT/autotune"
export AUTOTUNE_TEST_MLFLOW_URI="$ML_URI"
unset PG_PASSWORD
set +e
"$@"
status=$?
set -e
exit "$status"
