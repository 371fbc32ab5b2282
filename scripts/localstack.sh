#!/usr/bin/env bash
# LocalStack's S3 on this host, without Docker: an independent S3 implementation to run
# lakelock's conformance tests and an end-to-end scenario against (`python -m pytest -m
# localstack` calls this script; so can you).
#
#   scripts/localstack.sh setup          build the virtual environment and the TLS certificate
#   scripts/localstack.sh run [PORT]     setup, then serve S3 on 127.0.0.1:PORT (default 4566)
#                                        in the foreground until killed
#   scripts/localstack.sh python         print the interpreter of the virtual environment
#
# Everything lives under $LAKELOCK_LOCALSTACK_HOME (default ~/.cache/lakelock/localstack):
# the virtual environment (LocalStack needs Python >= 3.12: set LAKELOCK_LOCALSTACK_PYTHON, or
# one of python3.13, python3.12 or a pyenv 3.12+/3.13+ is used), a self-signed certificate
# (given by CUSTOM_SSL_CERT_PATH, so LocalStack does not try to download one) and its state.
# LocalStack listens on 127.0.0.1 only (its default server, twisted, would bind every
# interface whatever GATEWAY_LISTEN says; hypercorn binds the address given); its DNS server
# and usage events are switched off.
set -euo pipefail

HOME_DIR="${LAKELOCK_LOCALSTACK_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/lakelock/localstack}"
VENV="$HOME_DIR/venv"
CERT="$HOME_DIR/server.test.pem"
# The version the conformance notes in tests/test_endpoint_conformance.py were taken with.
PACKAGE="${LAKELOCK_LOCALSTACK_PACKAGE:-localstack-core[runtime]==2026.3.0}"

find_python() {
    local candidate version
    for candidate in "${LAKELOCK_LOCALSTACK_PYTHON:-}" python3.13 python3.12 \
        "$HOME"/.pyenv/versions/3.13*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || [ -x "$candidate" ] || continue
        version=$("$candidate" -c 'import sys; print(sys.version_info >= (3, 12))' 2>/dev/null) \
            || continue
        if [ "$version" = "True" ]; then
            echo "$candidate"
            return 0
        fi
    done
    echo "localstack.sh: LocalStack needs Python >= 3.12; none found" \
        "(set LAKELOCK_LOCALSTACK_PYTHON)" >&2
    return 1
}

setup() {
    mkdir -p "$HOME_DIR"
    if [ ! -f "$VENV/.installed" ] || [ "$(cat "$VENV/.installed")" != "$PACKAGE" ]; then
        local python
        python=$(find_python)
        rm -rf "$VENV"
        "$python" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        # cbor2 6 dropped an API LocalStack 2026.3 imports; service-identity lets its TLS
        # server check host names.
        "$VENV/bin/python" -m pip install --quiet "$PACKAGE" 'cbor2<6' service-identity
        echo "$PACKAGE" >"$VENV/.installed"
    fi
    if [ ! -f "$CERT" ]; then
        local tmp
        tmp=$(mktemp -d)
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=localhost" \
            -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
            -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
        cat "$tmp/key.pem" "$tmp/cert.pem" >"$CERT.tmp"
        mv "$CERT.tmp" "$CERT"
        rm -rf "$tmp"
    fi
}

run() {
    local port="${1:-4566}"
    setup
    mkdir -p "$HOME_DIR/state/$port"
    cd "$HOME_DIR/state/$port"
    exec env \
        SERVICES=s3 \
        GATEWAY_LISTEN="127.0.0.1:$port" \
        GATEWAY_SERVER=hypercorn \
        LOCALSTACK_HOST="127.0.0.1:$port" \
        CUSTOM_SSL_CERT_PATH="$CERT" \
        SKIP_SSL_CERT_DOWNLOAD=1 \
        DNS_ADDRESS=0 \
        DISABLE_EVENTS=1 \
        PERSISTENCE=0 \
        FILESYSTEM_ROOT="$HOME_DIR/state/$port" \
        "$VENV/bin/python" -m localstack.runtime.main
}

case "${1:-run}" in
setup) setup ;;
run) run "${2:-4566}" ;;
python)
    setup >&2
    echo "$VENV/bin/python"
    ;;
*)
    echo "usage: $0 setup | run [PORT] | python" >&2
    exit 2
    ;;
esac
