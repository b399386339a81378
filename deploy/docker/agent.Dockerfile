# fleetprof agent-injection image: carries libfleetprof.so and copies it into a volume shared
# with the application container, which preloads it (LD_PRELOAD=/fleetprof/libfleetprof.so;
# see deploy/k8s/20-collector-sidecar.yaml). The agent needs glibc >= 2.34 in the application
# image (it is built on Debian 12). Non-root (uid 10001).
#   podman build -f deploy/docker/agent.Dockerfile -t fleetprof-agent .    (from the repo root)
#   run: fleetprof-agent DIR   (copies libfleetprof.so into DIR)
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
COPY --from=build /out/opt/fleetprof/libfleetprof.so /opt/fleetprof/libfleetprof.so
USER 10001:10001
ENTRYPOINT ["/bin/cp", "/opt/fleetprof/libfleetprof.so"]
CMD ["/fleetprof"]
