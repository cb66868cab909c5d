#!/usr/bin/env bash
# Install headless Chromium for the MLflow UI test (tests/cli/test_ui.py loads the runs table in it).
#
# Usage: .ci/install-chromium.sh          (needs root, or sudo without a password)
#
# Idempotent: does nothing when /usr/bin/chromium is there already.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [[ -x "$CHROMIUM" ]]; then
    echo "install-chromium: $CHROMIUM already installed"
    exit 0
fi

SUDO=""
if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null; then
        echo "install-chromium: not root and no sudo: run as root, or install the 'chromium' package yourself" >&2
        exit 2
    fi
    SUDO="sudo -n"
fi

start=$(date +%s)
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
if [[ ! -x "$CHROMIUM" ]]; then
    echo "install-chromium: the chromium package did not provide $CHROMIUM (Ubuntu ships it as a snap):" \
         "install Debian's chromium or link your chromium binary there" >&2
    exit 1
fi
echo "install-chromium: installed $("$CHROMIUM" --version 2>/dev/null | head -1) in $(( $(date +%s) - start )) s"
