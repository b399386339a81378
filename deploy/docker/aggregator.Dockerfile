# fleetprof-aggregator image. Multi-stage: build with Debian's toolchain and -dev packages, run on
# Debian slim with the runtime libraries only (the build stage is the same in the three
# Dockerfiles, so a builder with a layer cache compiles once), as the non-root user fleetprof (uid 10001).
#   podman build -f deploy/docker/aggregator.Dockerfile -t fleetprof-aggregator .     (from the repo root)
# BASE lets a machine without registry access use a local Debian 12 image (see
# deploy/docker/README.md and tests/docker/test-docker.sh).
ARG BASE=docker.io/library/debian:bookworm-slim

FROM ${BASE} AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake ninja-build pkg-config librdkafka-dev libprotobuf-c-dev \
      protobuf-c-compiler libuv1-dev liblz4-dev libxxhash-dev libsqlite3-dev libjansson-dev \
      libinih-dev libmicrohttpd-dev libre2-dev libcurl4-openssl-dev libunwind-dev zlib1g-dev \
      openjdk-17-jdk-headless \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
 && ninja -C /build fleetprof-collector fleetprof-aggregator fleetprof_agent \
 && install -D -s /build/collector/fleetprof-collector /out/usr/bin/fleetprof-collector \
 && install -D -s /build/aggregator/fleetprof-aggregator /out/usr/bin/fleetprof-aggregator \
 && install -D -m 0644 -s /build/agent/libfleetprof.so /out/opt/fleetprof/libfleetprof.so

FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      librdkafka1 liblz4-1 libxxhash0 libprotobuf-c1 libmicrohttpd12 libre2-9 libinih1 libsqlite3-0 libjansson4 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fleetprof \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/fleetprof --no-create-home \
      --shell /usr/sbin/nologin fleetprof \
 && install -d -o 10001 -g 10001 -m 0755 /var/lib/fleetprof/aggregator
COPY --from=build /out/usr/bin/fleetprof-aggregator /usr/bin/fleetprof-aggregator
COPY deploy/aggregator.conf.example /etc/fleetprof/aggregator.conf
USER 10001:10001
EXPOSE 9402
ENTRYPOINT ["/usr/bin/fleetprof-aggregator"]
CMD ["--config", "/etc/fleetprof/aggregator.conf"]
