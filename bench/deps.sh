#!/bin/sh
# Installs what bench/run needs on Debian, skipping what is there: lookout's
# own build dependencies (tests/deps.sh) plus the load generator and the two
# anchor proxies.  Needs root (or sudo) only when something is missing.
# On a systemd host, installing nginx-light also starts Debian's default site
# on port 80; bench/run does not use it.  The kafka scenario needs librdkafka
# (librdkafka-dev, which tests/deps.sh installs for the Kafka fixtures) and
# nginx's stream module for its nginx row (libnginx-mod-stream); the pulsar
# scenario runs the Python test broker and its client under pypy3 (python3
# without it, several times slower).  gnuplot-nox draws the report's tables as
# SVG charts beside the results file (bench/charts.py; without it bench/run
# says so and writes the report alone).
LOOKOUT_EXTRA_PKGS="wrk nginx-light libnginx-mod-stream haproxy util-linux pypy3 gnuplot-nox $LOOKOUT_EXTRA_PKGS" \
    exec "$(dirname "$0")/../tests/deps.sh"
