#!/usr/bin/env bash
# The comparison with the published packages (see compare.py): installs mcp-shell-server 1.1.14
# and mcp-background-job 0.1.2 (with the dependency versions pinned in *.requirements.txt) from
# PyPI into their own virtualenvs (kept under the cargo target
# directory, so a second run reuses them), then runs the cases against them and against the
# debug build of mcp-yieldshell. Needs `cargo build --workspace` first.
#
# mcp-background-job needs Python >= 3.12: python3.13/python3.12 on PATH or a pyenv-installed
# one. Without such an interpreter, the two job profiles are reported as NOT COMPARED.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Absolute: the cases start each server from a scratch directory of their own, where a relative
# path to a venv's script would not resolve.
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
bin="$target/debug"
for b in mcp-yieldshell yieldctl yieldshelld; do
    [[ -x "$bin/$b" ]] || { echo "compare: $bin/$b is missing: run cargo build --workspace first" >&2; exit 1; }
done
venvs="$target/compare-venvs"
mkdir -p "$venvs"

# A Python of at least the given minor version, or nothing.
find_python() {
    local minor=$1 c
    local candidates=(python3.13 python3.12 python3)
    if command -v pyenv >/dev/null 2>&1; then
        candidates+=("$(pyenv root)"/versions/3.1[2-9]*/bin/python3)
    fi
    # Interpreters installed beside the system one (pyenv without its shims on PATH, Debian's
    # python3.12 package, a /usr/local build).
    candidates+=("$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 /usr/bin/python3.1[2-9] /usr/local/bin/python3.1[2-9])
    for c in "${candidates[@]}"; do
        if "$c" -c "import sys; sys.exit(0 if sys.version_info >= (3, $minor) else 1)" >/dev/null 2>&1; then
            command -v "$c" 2>/dev/null || echo "$c"
            return 0
        fi
    done
    return 1
}

# venv DIR PYTHON NAME: creates DIR with everything NAME.requirements.txt pins (the package and
# the exact dependencies the deliberate list was written against, so a new release of a
# dependency cannot change the published side's answers), unless DIR already has exactly that.
venv() {
    local dir=$1 python=$2 requirements="tests/compare/$3.requirements.txt"
    if [[ -f "$dir/.installed" ]] && cmp -s "$dir/.installed" "$requirements"; then
        return 0
    fi
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$dir/.installed"
}

python311=$(find_python 10) || { echo "compare: no python3 >= 3.10" >&2; exit 1; }
venv "$venvs/shell-server" "$python311" shell-server
job_args=()
if python312=$(find_python 12); then
    venv "$venvs/job-server" "$python312" job-server
    job_args=(--job-server "$venvs/job-server/bin/mcp-background-job")
else
    echo "compare: no Python >= 3.12 here, so mcp-background-job 0.1.2 cannot be installed" >&2
fi

# The client is the official MCP Python SDK that mcp-shell-server's venv already holds.
exec "$venvs/shell-server/bin/python" tests/compare/compare.py \
    --shim "$bin/mcp-yieldshell" --yieldctl "$bin/yieldctl" \
    --shell-server "$venvs/shell-server/bin/mcp-shell-server" "${job_args[@]}" "$@"
