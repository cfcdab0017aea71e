# Shared by .ci/run and .ci/test-extra (sourced, not run): phase timing, the system packages
# the extra test tiers need, and their installation.

# -- phases -----------------------------------------------------------------------------------
# `phase NAME` ends the current phase (recording its wall time) and starts NAME; the top-level
# script's `phase_summary` prints every phase's time, nested scripts' included (they append to
# the same file, named by CI_PHASES).
if [[ -z ${CI_PHASES:-} ]]; then
    CI_PHASES=$(mktemp)
    export CI_PHASES
    ci_phases_owner=1
fi
ci_phase_name=
ci_phase_start=$SECONDS
# CI_PHASE_PREFIX marks the phases of a script that runs alongside others (.ci/run's background
# build), whose times overlap theirs.
phase() {
    if [[ -n $ci_phase_name ]]; then
        printf '%6d s  %s%s\n' $((SECONDS - ci_phase_start)) "${CI_PHASE_PREFIX:-}" \
            "$ci_phase_name" >>"$CI_PHASES"
    fi
    ci_phase_name=$1
    ci_phase_start=$SECONDS
    echo "== $1"
}
# Ends the last phase; the top-level script prints them all.
phase_summary() {
    phase ""
    ci_phase_name=
    if [[ -n ${ci_phases_owner:-} ]]; then
        echo "== phase times (wall clock)"
        cat "$CI_PHASES"
        printf '%6d s  in all\n' "$SECONDS"
        rm -f "$CI_PHASES"
    fi
}

# -- packages ---------------------------------------------------------------------------------
# "command package": the extra tiers' tools (see tests/e2e/helper/prerequisites.rs).
# The previous release, whose holders this build's daemon must re-adopt (.ci/test-extra
# previous; issue 26 item 5). No release is tagged yet: this is the last landing of main before
# the holder protocol last changed (protocol 3; this build speaks 4). Move it to each release's
# tag once releases are cut.
PREVIOUS_RELEASE=e9da0b48df9113ba8aacf0ab30bc03a92f76cd6d

tool_packages=(
    "python3 python3"
    "node nodejs"
    "npm npm"
    "tmux tmux"
    "sshd openssh-server"
    "ssh openssh-client"
    "ssh-keygen openssh-client"
    "systemd-analyze systemd"
    "systemd-socket-activate systemd"
    "setpriv util-linux"
    "man man-db"
)
# release.sh and the tests of its artifacts.
dist_packages=(
    "python3 python3"
    "npm npm"
    "node nodejs"
    "objdump binutils"
)

# Installs the packages of the "command package" pairs whose command is missing: with apt-get
# when running as root on Debian/Ubuntu, else says what to install (the tests that need them
# then fail naming the package).
ensure_packages() {
    local missing=() pair tool package
    for pair in "$@"; do
        read -r tool package <<<"$pair"
        # sshd lives in sbin, which a non-root PATH may lack.
        if ! command -v "$tool" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$tool ]]; then
            missing+=("$package")
        fi
    done
    # Virtualenvs (release.sh, the packaging tests) need this on Debian's python3.
    if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        missing+=(python3-venv)
    fi
    ((${#missing[@]})) || return 0
    local packages
    mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing ${packages[*]}"
        # Waits for the package database rather than failing when another install holds it
        # (.ci/run installs everything in its background job while other phases run).
        apt-get -o DPkg::Lock::Timeout=900 update -qq
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
            --no-install-recommends "${packages[@]}"
    else
        echo "warning: not root with apt-get, so not installing ${packages[*]}:" \
            "the tests that need them will fail naming them" >&2
    fi
}

# The Windows target, the mingw linker and Wine.
ensure_windows_toolchain() {
    if ! rustup target list --installed | grep -qx x86_64-pc-windows-gnu; then
        rustup target add x86_64-pc-windows-gnu
    fi
    local pairs=("x86_64-w64-mingw32-gcc gcc-mingw-w64-x86-64" "wine wine")
    # Debian's wine needs its 64-bit half too.
    command -v wine >/dev/null 2>&1 || pairs+=("wine64 wine64")
    ensure_packages "${pairs[@]}"
}
