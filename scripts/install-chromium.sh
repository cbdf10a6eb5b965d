#!/usr/bin/env bash
# Install Debian's headless-capable chromium for the report's rendering test (tests/test_report_html.py).
#
# Idempotent: exits at once when a chromium binary is already on PATH (CI runs it every time).
# Needs root (apt-get); prints the binary's version at the end.
set -euo pipefail

find_chromium() {
  command -v chromium || command -v chromium-browser || command -v google-chrome || true
}

BIN="$(find_chromium)"
if [ -n "$BIN" ]; then
  echo "chromium already installed: $("$BIN" --version 2>/dev/null || echo "$BIN")"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core

BIN="$(find_chromium)"
if [ -z "$BIN" ]; then
  echo "chromium was installed but no chromium binary is on PATH" >&2
  exit 1
fi
echo "chromium installed: $("$BIN" --version 2>/dev/null || echo "$BIN")"
