#!/bin/sh
# Installs what bench/run needs on Debian, skipping what is there: lookout's
# own build dependencies (tests/deps.sh) plus the load generator and the two
# anchor proxies.  Needs root (or sudo) only when something is missing.
# On a systemd host, installing nginx-light also starts Debian's default site
# on port 80; bench/run does not use it.  The kafka scenario needs librdkafka
# (librdkafka-dev, which tests/deps.sh installs for the Kafka fixtures) and
# nginx's stream module for its nginx row (libnginx-mod-stream); the pulsar
# scenario builds its broker and client (bench/pulsar-broker.c, -load.c) with
# cc and libevent-dev, which tests/deps.sh installs for lookout (pypy3, for
# its Python pair under --pulsar-python, is not installed here).
# gnuplot-nox draws the report's tables as
# SVG charts beside the results file (bench/charts.py; without it bench/run
# says so and writes the report alone).
LOOKOUT_EXTRA_PKGS="wrk nginx-light libnginx-mod-stream haproxy util-linux gnuplot-nox $LOOKOUT_EXTRA_PKGS" \
    exec "$(dirname "$0")/../tests/deps.sh"
