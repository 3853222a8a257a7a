# lookout in a container, on Debian 12.  Build from the top of the source tree:
#
#   docker build -t lookout .
#   docker run -d --name lookout --network host \
#       -v /etc/lookout:/etc/lookout:ro lookout
#
# The image runs `lookout -c /etc/lookout/lookout.conf` as the unprivileged
# user lookout; mount your config (and the certificates and keys it names,
# readable by uid/gid 999 or by everyone) over /etc/lookout.  The example
# there is the annotated reference: it names example brokers and certificate
# files, so it does not start as it is.  Ports below 1024 need
# `--cap-add NET_BIND_SERVICE` or a port mapping.  The HEALTHCHECK asks the
# admin listener's /healthz, so the config needs `admin = 127.0.0.1:9901`
# (or set LOOKOUT_HEALTH_PORT); without it the container reports unhealthy.
# A seccomp profile that refuses io_uring (recent Docker releases' default
# one does) makes lookout warn once per worker and read and write with readv
# and writev; `io_uring = off` in the config says so without the warning.
#
# tests/install/lint.sh checks that every package named here exists in
# Debian 12 and that the runtime stage has every library lookout links.

# Build stage: autotools from the source tree, as in the README.
FROM debian:bookworm-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        autoconf automake make gcc libc6-dev pkg-config \
        libevent-dev libssl-dev libjansson-dev zlib1g-dev \
        libprotobuf-c-dev protobuf-c-compiler node-llhttp libzookeeper-mt-dev liburing-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN ./autogen.sh \
    && ./configure --prefix=/usr --sysconfdir=/etc --with-systemdsystemunitdir=no \
    && make -j"$(nproc)" lookout \
    && make install DESTDIR=/out \
    && /out/usr/sbin/lookout --version

# Runtime stage: the shared libraries lookout links, and nothing else.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libevent-2.1-7 libevent-core-2.1-7 libevent-openssl-2.1-7 \
        libssl3 libjansson4 libprotobuf-c1 libzookeeper-mt2 liburing2 zlib1g ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 999 lookout \
    && useradd --system --uid 999 --gid lookout --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin lookout
COPY --from=build /out/ /
USER lookout
# The reference config's ports: HTTPS, Pulsar binary over TLS, Kafka over
# TLS, and the admin listener.  What lookout listens on is the config's.
EXPOSE 8443 6651 9093 9901
ENV LOOKOUT_HEALTH_PORT=9901
# bash's /dev/tcp, so that the image needs no HTTP client.
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/$LOOKOUT_HEALTH_PORT && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
CMD ["lookout", "-c", "/etc/lookout/lookout.conf"]
