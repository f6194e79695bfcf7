# syntax=docker/dockerfile:1

# ---------------------------------------------------------------------------
# Build stage
# ---------------------------------------------------------------------------
FROM rust:1.88-bookworm AS builder

WORKDIR /app
ENV CARGO_TERM_COLOR=never \
    # Never try to reach a database at compile time (sqlx macros).
    SQLX_OFFLINE=true

# 1. Dependency layer: only the manifests, plus dummy lib/bin targets, so that
#    this (slow) layer is reused until a manifest or Cargo.lock changes. Cargo loads
#    every workspace member (testbed and xtask, the tooling crates) to resolve the
#    lock file, so their manifests and a dummy target each are needed too; only
#    the service itself is built (-p seckill).
COPY Cargo.toml Cargo.lock ./
COPY testbed/Cargo.toml ./testbed/
COPY xtask/Cargo.toml ./xtask/
RUN mkdir -p src testbed/src xtask/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs testbed/src/lib.rs \
    && echo 'fn main() {}' > xtask/src/main.rs \
    && cargo build --release --locked -p seckill \
    && rm -rf src

# 2. The real sources. lua/ is pulled in with include_str! and migrations/ with
#    sqlx::migrate!("./migrations"), so both must exist at compile time.
COPY src ./src
COPY lua ./lua
COPY migrations ./migrations
# touch: make sure cargo sees the real crate roots as newer than the dummy build.
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked -p seckill \
    && cp target/release/seckill /usr/local/bin/seckill

# ---------------------------------------------------------------------------
# Runtime stage
# ---------------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime

# ca-certificates for outbound TLS; curl only for the container health check.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 seckill \
    && useradd --system --uid 10001 --gid seckill \
        --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin seckill

COPY --from=builder /usr/local/bin/seckill /usr/local/bin/seckill

# Numeric ids (= the seckill user above) so runAsNonRoot-style checks can verify it.
USER 10001:10001
ENV SECKILL_LISTEN=0.0.0.0:8080
EXPOSE 8080
# The service drains in-flight work on SIGTERM (compose gives it 50s).
STOPSIGNAL SIGTERM

ENTRYPOINT ["seckill"]
CMD ["serve"]
