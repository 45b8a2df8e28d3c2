#!/usr/bin/env bash
# The project's test command (README.md "The two commands", .ci/run). From a clean clone on
# Debian/Ubuntu with the Rust toolchain, python3 and pip:
#
#   1. installs the tools the tests run (fuse3 rsync jq time vim dash chromium chromium-driver),
#      only those that are missing;
#   2. checks that /dev/fuse exists (the mount tests use real FUSE mounts, never mocks);
#   3. creates .venv with deltalake, duckdb, pyarrow and selenium (the browser test of
#      tests/cli/serve.rs, with Debian's chromium-driver: selenium downloads nothing) for the Delta interop tests
#      (tests/cli/delta_compat.rs, tests/cli/export.rs), unless .venv already has them, and .venv-delta
#      with DuckDB's delta extension as packaged for pip (duckdb-extension-delta, which pins the
#      duckdb it was built for, so it lives apart; tests/cli/export.rs reads exports with delta_scan)
#      and duckdb-cli (the `duckdb` command the CSV hint names; tests/cli/cli.rs runs the hint offline);
#   4. runs `cargo test --release` with TINYDELTA_PYTHON pointing at .venv/bin/python: the
#      integration-test binaries lib (the library in-process), cli (the `tinydelta` binary) and
#      mount (real FUSE mounts), see tests/*/main.rs, after the unit tests.
#
#      TINYDELTA_DELTA_PYTHON points at .venv-delta/bin/python;
#   5. installs the Python package into .venv (`pip install ./python`: maturin builds the extension
#      in release mode into target/, reused between runs) and runs its pytest suite
#      (python/tests, docs/PYTHON.md "Tests"), which also drives target/release/tinydelta.
# Extra arguments go to cargo test:  scripts/test.sh --test cli delta_compat::
# Exits non-zero if any step or any test fails. Needs root (or passwordless sudo) only when
# apt packages are missing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

step() { printf '\n==> %s\n' "$*"; }
die() {
    printf '\nscripts/test.sh: %s\n' "$*" >&2
    exit 1
}
started=$SECONDS

# --- 1. system packages ----------------------------------------------------------------------
step "System tools: fuse3 rsync jq time vim dash passwd util-linux chromium chromium-driver"
missing=()
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v vim >/dev/null 2>&1 || missing+=(vim)
command -v dash >/dev/null 2>&1 || missing+=(dash) # tests/mount/tools.rs: a redirection under dash
# tests/mount/security.rs creates an unprivileged user and runs commands as it.
command -v useradd >/dev/null 2>&1 || missing+=(passwd)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
type -P time >/dev/null 2>&1 || missing+=(time) # `command -v time` finds the shell keyword
# tests/cli/serve.rs drives the page of `tinydelta serve` in headless Chromium through WebDriver.
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
[[ -x /usr/bin/chromedriver ]] || missing+=(chromium-driver)
# Debian's python3 has no venv/ensurepip until python3-venv is installed.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || [[ -x .venv/bin/python ]] || missing+=(python3-venv)

if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    if [[ $(id -u) -eq 0 ]]; then
        sudo=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        die "missing packages ${missing[*]} and not root (no passwordless sudo): run  apt-get install -y ${missing[*]}  as root, then run scripts/test.sh again."
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "missing packages ${missing[*]} and no apt-get: install them with your package manager."
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq </dev/null || die "apt-get update failed"
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null ||
        die "apt-get install ${missing[*]} failed"
else
    echo "all present"
fi

# --- 2. FUSE ---------------------------------------------------------------------------------
step "FUSE device"
if [[ ! -c /dev/fuse ]]; then
    die "/dev/fuse does not exist, so the mount tests cannot run. Load the module (modprobe fuse) or, in a container, start it with  --device /dev/fuse --cap-add SYS_ADMIN  (and an apparmor profile that allows mount)."
fi
echo "/dev/fuse ok"

# --- 3. Python venv for the Delta interop test ---------------------------------------------
step "Python venv (.venv): deltalake duckdb pyarrow polars selenium pandas pytest"
venv_ok() {
    [[ -x .venv/bin/python ]] &&
        .venv/bin/python -c 'import deltalake, duckdb, pyarrow, polars, selenium, pandas, pytest' >/dev/null 2>&1
}
if venv_ok; then
    echo "already set up"
else
    if [[ ! -x .venv/bin/python ]] || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
        rm -rf .venv
        python3 -m venv .venv || die "python3 -m venv .venv failed"
    fi
    .venv/bin/python -m pip install --quiet --disable-pip-version-check \
        'deltalake>=1.0' 'duckdb>=1.0' 'pyarrow>=15' polars 'selenium>=4.11' pandas pytest </dev/null ||
        die "pip install deltalake duckdb pyarrow polars selenium pandas pytest into .venv failed"
    venv_ok || die ".venv/bin/python still cannot import deltalake, duckdb, pyarrow, polars, selenium, pandas and pytest"
fi
.venv/bin/python -c 'import deltalake, duckdb, pyarrow, polars, sys
print(f"python {sys.version.split()[0]}, deltalake {deltalake.__version__}, duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}, polars {polars.__version__}")'
export TINYDELTA_PYTHON="$repo/.venv/bin/python"

step "Python venv (.venv-delta): duckdb-extension-delta (DuckDB's delta_scan) and duckdb-cli (the duckdb command of the CSV hint)"
delta_ok() {
    [[ -x .venv-delta/bin/python && -x .venv-delta/bin/duckdb ]] &&
        .venv-delta/bin/python -c 'import duckdb, duckdb_extension_delta' >/dev/null 2>&1
}
if delta_ok; then
    echo "already set up"
else
    if [[ ! -x .venv-delta/bin/python ]] || ! .venv-delta/bin/python -m pip --version >/dev/null 2>&1; then
        rm -rf .venv-delta
        python3 -m venv .venv-delta || die "python3 -m venv .venv-delta failed"
    fi
    .venv-delta/bin/python -m pip install --quiet --disable-pip-version-check duckdb-extension-delta duckdb-cli </dev/null ||
        die "pip install duckdb-extension-delta duckdb-cli into .venv-delta failed"
    delta_ok || die ".venv-delta/bin/python still cannot import duckdb and duckdb_extension_delta, or has no bin/duckdb"
fi
.venv-delta/bin/python -c 'import duckdb; print(f"duckdb {duckdb.__version__} with the delta extension")'
export TINYDELTA_DELTA_PYTHON="$repo/.venv-delta/bin/python"

# --- 4. the tests ----------------------------------------------------------------------------
step "cargo test --release $*"
cargo_started=$SECONDS
status=0
cargo test --release "$@" </dev/null || status=$?

# --- 5. the Python package -------------------------------------------------------------------
step "Python package: pip install ./python into .venv, then pytest python/tests"
py_started=$SECONDS
py_status=0
.venv/bin/python -m pip install --quiet --disable-pip-version-check ./python </dev/null || py_status=$?
if ((py_status == 0)); then
    # The race tests run the CLI binary that cargo test built.
    TINYDELTA_BIN="$repo/target/release/tinydelta" .venv/bin/python -m pytest -q python/tests </dev/null || py_status=$?
    echo "pytest: $((SECONDS - py_started))s"
else
    echo "pip install ./python failed (exit status $py_status)" >&2
fi
if ((status == 0 && py_status != 0)); then
    status=$py_status
fi

echo
if ((status == 0)); then
    echo "==> all tests passed (cargo test: $((SECONDS - cargo_started))s, total: $((SECONDS - started))s)"
else
    echo "==> TESTS FAILED (exit status $status: cargo test, then pip install and pytest; total: $((SECONDS - started))s)" >&2
fi
exit "$status"
