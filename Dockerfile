# syntax=docker/dockerfile:1

# Build a static binary on the build machine's platform, for the target's.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/bot ./cmd/bot \
 && mkdir -p /out/data /out/workspace

# The "tools" image: Debian slim with a shell, for bots that start stdio MCP
# servers or run_command programs. Build it with `docker build --target tools`
# and add the tools' binaries on top (see the README). The bot is PID 1: it
# reaps the processes tools leave behind itself. (An init such as tini in
# front of it would hold the bot's environment, the tokens, in a process of
# the same user, which the programs it starts could read.)
FROM debian:trixie-slim AS tools
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --shell /bin/sh nonroot
COPY --from=build /out/bot /usr/local/bin/bot
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build --chown=65532:65532 /out/workspace /workspace
ENV DATA_DIR=/data \
    HTTP_ADDR=:8080
VOLUME ["/data"]
EXPOSE 8080
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/usr/local/bin/bot"]

# The default image. Distroless: CA certificates and a non-root user (65532),
# no shell.
FROM gcr.io/distroless/static-debian12:nonroot AS distroless
COPY --from=build /out/bot /usr/local/bin/bot
# The embedded store's directory (used when REDIS_URL is unset) and the
# built-in workspace tools' root (see config.example.yaml), owned by the
# user the bot runs as.
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build --chown=65532:65532 /out/workspace /workspace
ENV DATA_DIR=/data \
    HTTP_ADDR=:8080
VOLUME ["/data"]
# /healthz, /readyz and /metrics.
EXPOSE 8080
USER 65532:65532
# config.example.yaml's relative workspace root resolves to /workspace.
WORKDIR /
# There is no HEALTHCHECK: the image has no shell or HTTP client to run one.
# Probe the endpoints from outside instead, for example in Kubernetes:
#   livenessProbe:  {httpGet: {path: /healthz, port: 8080}}
#   readinessProbe: {httpGet: {path: /readyz, port: 8080}}
# The bot stops gracefully on SIGTERM: it lets in-flight work finish for up to
# SHUTDOWN_GRACE (30 seconds), so give it a longer stop timeout than that.
ENTRYPOINT ["/usr/local/bin/bot"]
