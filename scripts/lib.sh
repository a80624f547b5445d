# Shared helpers for scripts/up (command 1) and scripts/test (command 2). Sourced, not run.
# Everything here is idempotent: each step checks before it installs or starts anything.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export PATH="$HOME/.cargo/bin:$PATH"
# Leptos reads these at compile time (both the wasm and the server build) and at run time.
export LEPTOS_OUTPUT_NAME=tokenscope LEPTOS_SITE_ROOT="$CARGO_TARGET_DIR/site" LEPTOS_SITE_PKG_DIR=pkg
WASM_BINDGEN_VERSION="$(grep -A1 '^name = "wasm-bindgen"$' "$ROOT/Cargo.lock" | sed -n 's/^version = "\(.*\)"/\1/p')"
SQLX_CLI_VERSION=0.9.0
# TOKENSCOPE_TIMINGS=1 makes each cargo build write its timing report (target/cargo-timings/).
CARGO_TIMINGS=()
[ -n "${TOKENSCOPE_TIMINGS:-}" ] && CARGO_TIMINGS=(--timings)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

APT_UPDATED=0
apt_install() { # apt_install PKG... — installs the missing ones only
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  if [ $APT_UPDATED = 0 ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

pg_bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

ensure_build_tools() {
  command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup first" >&2; exit 1; }
  command -v cc >/dev/null || apt_install build-essential
  [ -n "$(pg_bin_dir)" ] || apt_install postgresql
  rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
  if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
    log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (about 3 min, once)"
    # Not --locked: its lockfile pins a crate version the registry does not serve.
    cargo install -q wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
  fi
}

ensure_sqlx_cli() {
  if [ "$(cargo sqlx --version 2>/dev/null | awk '{print $2}')" != "$SQLX_CLI_VERSION" ]; then
    log "installing sqlx-cli $SQLX_CLI_VERSION (about 3 min, once)"
    cargo install -q sqlx-cli --version "$SQLX_CLI_VERSION" --locked --no-default-features --features postgres,rustls
  fi
}

ensure_browser_tools() {
  apt_install chromium
  # Node may come from elsewhere than Debian (its npm then conflicts with Debian's): check commands.
  command -v npm >/dev/null || apt_install nodejs npm
  if [ ! -d "$ROOT/end2end/node_modules/playwright-core" ]; then
    log "installing end-to-end test tools (npm, no browser download)"
    (cd "$ROOT/end2end" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
  fi
}

# ensure_venv DIR REQUIREMENTS WHAT: a Python venv holding exactly these requirements
# (reinstalled when the file changes).
ensure_venv() {
  local venv="$1" req="$2"
  if [ ! -f "$venv/.installed" ] || ! cmp -s "$req" "$venv/.installed"; then
    log "installing $3 (venv in $venv)"
    python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$venv"; }
    "$venv/bin/pip" install -q -r "$req"
    cp "$req" "$venv/.installed"
  fi
}

# The OpenTelemetry Python SDK: the independent OTLP client of the end-to-end tests.
OTEL_VENV="$CARGO_TARGET_DIR/otel-venv"
ensure_otel_sdk() {
  ensure_venv "$OTEL_VENV" "$ROOT/end2end/otel_sdk/requirements.txt" "the OpenTelemetry Python SDK"
}

# vLLM, for the exporter's tests against its real scheduler.
VLLM_VENV="${TOKENSCOPE_VLLM_VENV:-$CARGO_TARGET_DIR/vllm-venv}"
ensure_vllm() {
  ensure_venv "$VLLM_VENV" "$ROOT/exporters/vllm/requirements-test.txt" \
    "vLLM for the exporter's tests (about 9.5 GB and 6 min, once)"
}

# venv_over_vllm DIR: a new venv that borrows every package of the vLLM venv (a .pth file);
# what is installed into it comes first.
venv_over_vllm() {
  local venv="$1" site
  rm -rf "$venv"
  python3 -m venv "$venv"
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$VLLM_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/vllm-venv.pth"
}

# The newest vLLM release, in a venv that borrows the rest from the pinned one's (a .pth file):
# the plugin is tested on both (exporters/vllm/requirements-next.txt says why that is enough).
VLLM_NEXT_VENV="${TOKENSCOPE_VLLM_NEXT_VENV:-$CARGO_TARGET_DIR/vllm-next-venv}"
ensure_vllm_next() {
  ensure_vllm
  local req="$ROOT/exporters/vllm/requirements-next.txt"
  if [ ! -f "$VLLM_NEXT_VENV/.installed" ] || ! cmp -s "$req" "$VLLM_NEXT_VENV/.installed"; then
    log "installing the newest vLLM for the exporter's tests (venv in $VLLM_NEXT_VENV, over the pinned one's)"
    venv_over_vllm "$VLLM_NEXT_VENV"
    "$VLLM_NEXT_VENV/bin/pip" install -q --no-deps -r "$req"
    cp "$req" "$VLLM_NEXT_VENV/.installed"
  fi
}

# SGLang for its exporter's tests: SGLang itself without its GPU kernels (`--no-deps`), in a venv
# that borrows torch, transformers and the rest from the vLLM venv through a .pth file (about
# 0.3 GB more instead of another 10). The plugin is installed on every call: SGLang finds it by
# its entry point, which only an installed package has.
SGLANG_VENV="${TOKENSCOPE_SGLANG_VENV:-$CARGO_TARGET_DIR/sglang-venv}"
ensure_sglang() {
  ensure_vllm
  local req="$ROOT/exporters/sglang/requirements-test.txt"
  if [ ! -f "$SGLANG_VENV/.installed" ] || ! cmp -s "$req" "$SGLANG_VENV/.installed"; then
    log "installing SGLang for the exporter's tests (venv in $SGLANG_VENV, over the vLLM venv's torch)"
    venv_over_vllm "$SGLANG_VENV"
    "$SGLANG_VENV/bin/pip" install -q --no-deps sglang=="$(sed -n 's/^sglang==//p' "$req")"
    # pip lists every pin of SGLang's that the borrowed packages do not match: kept in a log.
    grep -v '^sglang==' "$req" | "$SGLANG_VENV/bin/pip" install -q -r /dev/stdin 2>"$SGLANG_VENV/pip.log" ||
      { cat "$SGLANG_VENV/pip.log"; return 1; }
    cp "$req" "$SGLANG_VENV/.installed"
  fi
  # The exporter's native part (exporters/core/setup.py) builds with a C compiler and Python's
  # headers; without them pip skips it and the exporter packs in Python (a test says so).
  command -v cc >/dev/null || apt_install build-essential
  "$SGLANG_VENV/bin/python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' ||
    apt_install python3-dev
  "$SGLANG_VENV/bin/pip" install -q --no-deps --force-reinstall "$ROOT/exporters/core" "$ROOT/exporters/sglang" 2>"$SGLANG_VENV/pip.log" ||
    { cat "$SGLANG_VENV/pip.log"; return 1; }
  rm -rf "$ROOT"/exporters/{core,sglang}/{build,*.egg-info}  # setuptools builds in the source tree
}

# wasm-opt from npm's binaryen: Debian's (version 108) produces a wasm that fails to hydrate.
WASM_OPT_VERSION=132.0.0
ensure_wasm_opt() {
  local dir="$CARGO_TARGET_DIR/tools/binaryen"
  if [ ! -x "$dir/node_modules/.bin/wasm-opt" ]; then
    command -v npm >/dev/null || apt_install nodejs npm
    log "installing wasm-opt (npm binaryen $WASM_OPT_VERSION, once)"
    mkdir -p "$dir"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --prefix . "binaryen@$WASM_OPT_VERSION" >/dev/null)
  fi
  WASM_OPT="$dir/node_modules/.bin/wasm-opt"
}

# The browser app builds in a target dir of its own, so that it can build at the same time as the
# server (one target dir admits one cargo at a time). They share no compiled crate anyway: every
# crate of the wasm build is built for another target or profile.
WASM_TARGET_DIR="$CARGO_TARGET_DIR/wasm"

# build_site PROFILE — the cargo-leptos build done with plain cargo: wasm → wasm-bindgen → site dir.
build_site() {
  local profile="$1" wasm_profile wasm_dir
  if [ "$profile" = release ]; then wasm_profile=wasm-release; wasm_dir=wasm-release; else wasm_profile=dev; wasm_dir=debug; fi
  log "building the browser app (wasm, $wasm_profile)"
  cargo build -q "${CARGO_TIMINGS[@]}" --target-dir "$WASM_TARGET_DIR" -p app --lib --target wasm32-unknown-unknown \
    --no-default-features --features hydrate --profile "$wasm_profile"
  local pkg="$LEPTOS_SITE_ROOT/$LEPTOS_SITE_PKG_DIR"
  mkdir -p "$pkg"
  wasm-bindgen --target web --no-typescript --out-dir "$pkg" --out-name tokenscope \
    "$WASM_TARGET_DIR/wasm32-unknown-unknown/$wasm_dir/app.wasm"
  mv "$pkg/tokenscope_bg.wasm" "$pkg/tokenscope.wasm"
  if [ "$profile" = release ]; then
    ensure_wasm_opt
    log "shrinking the wasm (wasm-opt -Oz)"
    "$WASM_OPT" -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
      -o "$pkg/tokenscope.opt.wasm" "$pkg/tokenscope.wasm"
    mv "$pkg/tokenscope.opt.wasm" "$pkg/tokenscope.wasm"
  fi
  cp "$ROOT/style/main.css" "$pkg/tokenscope.css"
  cp -r "$ROOT/public/." "$LEPTOS_SITE_ROOT/"
}

# pg_start DIR PORT MODE — a project-local cluster; MODE=durable (user data) or throwaway (tests).
# Postgres refuses to run as root, so as root the cluster belongs to the `postgres` user.
pg_start() {
  local dir="$1" port="$2" mode="$3" bin run=() opts
  bin="$(pg_bin_dir)"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
    run=(runuser -u postgres --)
  fi
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir" && chmod 700 "$dir"
  if ! "${run[@]}" test -w "$dir"; then
    echo "the postgres user cannot write $dir (a parent directory is not reachable for it);" \
         "set DATABASE_URL to an existing database instead" >&2; exit 1
  fi
  if [ ! -s "$dir/PG_VERSION" ]; then
    "${run[@]}" "$bin/initdb" -D "$dir" -U postgres --auth=trust --encoding=UTF8 --locale=C >/dev/null
  fi
  opts="-p $port -k $dir -c listen_addresses=127.0.0.1"
  # Only throwaway test clusters trade durability for speed; the user's cluster keeps fsync on.
  [ "$mode" = throwaway ] && opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
  if ! "${run[@]}" "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
    if ! "${run[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -o "$opts" start >/dev/null; then
      echo "Postgres did not start (port $port in use? choose another with TOKENSCOPE_PG_PORT); its log ends:" >&2
      tail -n 5 "$dir/server.log" >&2
      exit 1
    fi
  fi
}

pg_stop() {
  local dir="$1" run=()
  [ "$(id -u)" = 0 ] && run=(runuser -u postgres --)
  "${run[@]}" "$(pg_bin_dir)/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
