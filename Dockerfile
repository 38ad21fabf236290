# syntax=docker/dockerfile:1
# dovetail's image: built with the Rust toolchain, run from a distroless
# base with glibc and CA certificates, no shell and no package manager, as
# an unprivileged user. The Deployment in deploy/ runs it with a read-only
# root filesystem: the binary writes nothing but to its volumes.
#
#   docker build -t registry.example.com/dovetail:0.1.0 .

ARG RUST_VERSION=1.91

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
# aws-lc-sys (the AWS SDK's TLS) builds with CMake.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY tests/main.rs ./tests/main.rs
# tests/scenarios/demo.yaml and examples-repo/ are compiled into the binary
# (the bundled demo of `dovetail simulate`), and so are crds/ (the printer
# columns of `simulate --serve`); schemas/ is checked against the types by
# unit tests only.
COPY tests/scenarios/demo.yaml ./tests/scenarios/demo.yaml
COPY examples-repo ./examples-repo
COPY crds ./crds
# Stripped: the release profile keeps line tables for local backtraces,
# which make the binary about 495 MB; without them and the symbols it is
# about 53 MB, and the image pulls that much faster on every new node.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin dovetail \
    && install -D -m 0755 target/release/dovetail /out/dovetail

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/dovetail /usr/local/bin/dovetail
# distroless's `nonroot` user; numeric, so `runAsNonRoot` can verify it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/dovetail"]
CMD ["controller"]
