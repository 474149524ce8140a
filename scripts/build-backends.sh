#!/usr/bin/env bash
# Build whisper-server and sd-server from the C++ sources vendored in PyPI sdists.
#
# Neither binary is published on a registry we can reach, but the sdists of
# pywhispercpp and stable-diffusion-cpp-python carry the full upstream sources
# (their wheels only hold Python bindings). Builds are static so the binaries
# survive the sdist/build folders being deleted.
#
# Idempotent: a binary that already exists under $BACKENDS_DIR/bin and runs is
# left alone, so calling this from CI on every run costs a second or two.
#
# Environment:
#   TENSOR_ROUTER_BACKENDS_DIR  output root (default ~/.cache/tensor-router/backends: one build per machine, shared by every checkout)
#   BUILD_JOBS                  parallel compile jobs (default 2)
#   PYTHON                      interpreter whose pip downloads the sdists
#   FORCE_REBUILD=1             rebuild even when a working binary exists
set -euo pipefail

PYWHISPERCPP_VERSION="1.5.1"
# 0.4.7 vendors a stable-diffusion.cpp that has examples/server (sd-server);
# data/sdxs_512_ds_tensors.json was dumped from this very version.
SDCPP_PYTHON_VERSION="0.4.7"

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BACKENDS_DIR="${TENSOR_ROUTER_BACKENDS_DIR:-$HOME/.cache/tensor-router/backends}"
BUILD_JOBS="${BUILD_JOBS:-2}"
BIN_DIR="$BACKENDS_DIR/bin"
SRC_DIR="$BACKENDS_DIR/src"
BUILD_ROOT="$BACKENDS_DIR/build"

log() { printf '[build-backends] %s\n' "$*" >&2; }
die() { printf '[build-backends] ERROR: %s\n' "$*" >&2; exit 1; }

pick_python() {
    if [[ -n "${PYTHON:-}" ]]; then
        echo "$PYTHON"
    elif [[ -x "$REPO_DIR/.venv/bin/python" ]]; then
        echo "$REPO_DIR/.venv/bin/python"
    else
        command -v python3 || die "no python3 found (set PYTHON=...)"
    fi
}

ensure_build_tools() {
    local missing=()
    command -v cmake >/dev/null || missing+=(cmake)
    command -v c++ >/dev/null || missing+=(g++)
    command -v make >/dev/null || missing+=(make)
    command -v tar >/dev/null || missing+=(tar)
    if ((${#missing[@]} == 0)); then
        return
    fi
    log "missing build tools: ${missing[*]}; installing via apt-get"
    command -v apt-get >/dev/null || die "need ${missing[*]} and apt-get is unavailable"
    local sudo=""
    [[ "$(id -u)" == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
        cmake g++ make tar ca-certificates || die "apt-get install failed"
}

# A binary counts as working if it starts and prints its usage; a truncated
# copy from an interrupted build or a missing shared library fails here.
binary_runs() {
    local bin="$1"
    [[ -x "$bin" ]] || return 1
    timeout 20 "$bin" --help >/dev/null 2>&1
}

# Download (once) and unpack (once) an sdist; prints the unpacked folder.
fetch_sdist() {
    local pkg="$1" version="$2" python
    python="$(pick_python)"
    mkdir -p "$SRC_DIR"
    local archive
    archive="$(find "$SRC_DIR" -maxdepth 1 -iname "${pkg//-/[-_]}-${version}.tar.gz" | head -n1)"
    if [[ -z "$archive" ]]; then
        log "downloading sdist $pkg==$version"
        "$python" -m pip download --quiet --no-deps --no-binary "$pkg" \
            "$pkg==$version" -d "$SRC_DIR" >&2 || die "pip download of $pkg==$version failed"
        archive="$(find "$SRC_DIR" -maxdepth 1 -iname "${pkg//-/[-_]}-${version}.tar.gz" | head -n1)"
        [[ -n "$archive" ]] || die "pip download produced no $pkg-$version.tar.gz in $SRC_DIR"
    fi
    local unpacked="${archive%.tar.gz}"
    if [[ ! -d "$unpacked" ]]; then
        log "unpacking $(basename "$archive")"
        tar -xzf "$archive" -C "$SRC_DIR" || die "cannot unpack $archive"
    fi
    [[ -d "$unpacked" ]] || die "unpacked folder $unpacked not found"
    echo "$unpacked"
}

# cmake configure + build one target, then copy the binary into bin/.
cmake_build() {
    local name="$1" source="$2"
    shift 2
    local build="$BUILD_ROOT/$name"
    [[ -f "$source/CMakeLists.txt" ]] || die "no CMakeLists.txt in $source"
    log "configuring $name from $source"
    cmake -S "$source" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF "$@" \
        >"$build.configure.log" 2>&1 || {
        tail -n 30 "$build.configure.log" >&2
        die "cmake configure of $name failed (full log: $build.configure.log)"
    }
    log "compiling $name with -j$BUILD_JOBS (a few minutes; log: $build.build.log)"
    local started=$SECONDS
    cmake --build "$build" --target "$name" -j "$BUILD_JOBS" >"$build.build.log" 2>&1 || {
        tail -n 30 "$build.build.log" >&2
        die "build of $name failed (full log: $build.build.log)"
    }
    local produced
    produced="$(find "$build" -type f -name "$name" -perm -u+x | head -n1)"
    [[ -n "$produced" ]] || die "build finished but no $name executable under $build"
    install -m 0755 "$produced" "$BIN_DIR/$name"
    log "built $BIN_DIR/$name in $((SECONDS - started)) s"
}

build_whisper_server() {
    local sdist
    sdist="$(fetch_sdist pywhispercpp "$PYWHISPERCPP_VERSION")"
    cmake_build whisper-server "$sdist/whisper.cpp" \
        -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=ON
}

build_sd_server() {
    local sdist
    sdist="$(fetch_sdist stable-diffusion-cpp-python "$SDCPP_PYTHON_VERSION")"
    # WebP/WebM pull extra sources and the frontend needs pnpm: none are needed
    # for PNG output, which is all the router relies on.
    cmake_build sd-server "$sdist/vendor/stable-diffusion.cpp" \
        -DSD_WEBP=OFF -DSD_WEBM=OFF -DSD_SERVER_BUILD_FRONTEND=OFF
}

main() {
    mkdir -p "$BIN_DIR" "$BUILD_ROOT"
    log "output folder: $BIN_DIR"
    local name
    for name in whisper-server sd-server; do
        if [[ "${FORCE_REBUILD:-0}" != 1 ]] && binary_runs "$BIN_DIR/$name"; then
            log "$name already built and runs: skipping ($BIN_DIR/$name)"
            continue
        fi
        ensure_build_tools
        case "$name" in
            whisper-server) build_whisper_server ;;
            sd-server) build_sd_server ;;
        esac
        binary_runs "$BIN_DIR/$name" || die "$BIN_DIR/$name was built but does not run"
    done
    log "done: $(ls "$BIN_DIR" | tr '\n' ' ')"
}

main "$@"
