#!/usr/bin/env bash
# Installs what GroupSync needs from Debian/Ubuntu packages, only when something is missing:
# the mosquitto broker, its command-line clients, libmosquitto's and OpenSSL's headers (libcrypto, libssl), openssl for the TLS tests,
# paho-mqtt for the Python participant of the interoperability tests (docs/interop/participant.py), and
# Node.js, which runs the Node-RED flow's function node of docs/DASHBOARDS.md in its test.
set -euo pipefail

missing=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
command -v mosquitto_sub >/dev/null 2>&1 || missing+=(mosquitto-clients)
pkg-config --exists libmosquitto 2>/dev/null || missing+=(libmosquitto-dev pkg-config)
pkg-config --exists libcrypto 2>/dev/null || missing+=(libssl-dev pkg-config)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
/usr/bin/python3 -c 'import paho.mqtt' >/dev/null 2>&1 || missing+=(python3-paho-mqtt)
command -v node >/dev/null 2>&1 || missing+=(nodejs)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "GroupSync needs: ${missing[*]} (Debian package names). Install them with your package manager." >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "Installing ${missing[*]} ..." >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
