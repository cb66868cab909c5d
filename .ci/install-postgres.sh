#!/usr/bin/env bash
# Install PostgreSQL from Debian's packages, for the tests that share one study between several workers
# (.ci/with-services.sh starts a throwaway cluster from it; nothing here starts or configures a server).
#
# Usage: .ci/install-postgres.sh          (needs root, or sudo without a password)
#
# Idempotent: does nothing when a PostgreSQL server (initdb, pg_ctl) is installed already.
set -euo pipefail

installed() { compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; }

if installed; then
    echo "install-postgres: $(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1) already installed"
    exit 0
fi

SUDO=""
if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null; then
        echo "install-postgres: not root and no sudo: run as root, or install the 'postgresql' package yourself" >&2
        exit 2
    fi
    SUDO="sudo -n"
fi

start=$(date +%s)
$SUDO apt-get update -qq
# The package's own cluster ("main" on port 5432) is created by the package; the tests never use it.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
if ! installed; then
    echo "install-postgres: the postgresql package did not provide /usr/lib/postgresql/*/bin/pg_ctl" >&2
    exit 1
fi
echo "install-postgres: installed $(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1) in $(( $(date +%s) - start ))s"
