#!/usr/bin/env bash
# Builds every artifact of a YieldShell release into target/dist/ (or $CARGO_TARGET_DIR/dist/),
# from a clean clone, with nothing but crates.io, PyPI and npm, for this Linux machine's
# architecture and for macOS (Apple silicon and Intel):
#
#   yieldshell-<version>-<target>.tar.gz (+ .sha256)  the binaries, units, completions,
#                                                     man pages, licenses, README, CHANGELOG
#   yieldshell-<version>-py3-none-manylinux_2_28_<arch>.whl   `pip install` / `uvx` / `pipx`
#   yieldshell-<version>-py3-none-macosx_11_0_arm64.whl, ...-macosx_10_12_x86_64.whl
#   yieldshell-<version>.tgz, yieldshell-<os>-<cpu>-<version>.tgz   npm launcher + one package
#                                                     per platform (linux-*, darwin-arm64/-x64)
#   SHA256SUMS                                        every file above
#
# The Linux binaries are linked by zig against glibc 2.28 (manylinux_2_28), so they run on any
# glibc-based distribution from 2018 on, whatever this machine's glibc is; the script refuses a
# binary that needs a newer symbol. The macOS binaries are cross-compiled and linked by zig too
# (against the macOS SDK stubs zig ships: libSystem only, no framework is needed), for macOS 11
# (arm64) and 10.12 (x86_64), Rust's minimums; the script refuses a binary that is not a Mach-O
# of its architecture. Nothing can run them here: their man pages and completions are the Linux
# build's (the same text). The tools (maturin, ziglang) come from PyPI into a venv under the
# target directory, pinned, so two runs use the same ones.
#
# Environment:
#   YIELDSHELL_DIST_PROFILE  cargo profile: `dist-publish` (default; fat LTO, what is published) or
#                            `dist-check` (no LTO: what CI builds to check the pipeline)
#   YIELDSHELL_DIST_MACOS    `0` skips the macOS artifacts (a quicker local run); default `1`
#   SOURCE_DATE_EPOCH        timestamp of the tarball's files (default: the last commit's)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

profile=${YIELDSHELL_DIST_PROFILE:-dist-publish}
glibc=2.28
# target triple:npm platform:Mach-O architecture:minimum macOS (Rust's own minimum per target)
macos_targets=()
if [[ ${YIELDSHELL_DIST_MACOS:-1} != 0 ]]; then
    macos_targets=(aarch64-apple-darwin:darwin-arm64:arm64:11.0
        x86_64-apple-darwin:darwin-x64:x86_64:10.12)
fi
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) triple=x86_64-unknown-linux-gnu npm_platform=linux-x64 ;;
    Linux-aarch64) triple=aarch64-unknown-linux-gnu npm_platform=linux-arm64 ;;
    *)
        echo "release.sh builds Linux artifacts on Linux (x86_64 or aarch64); see the README's" \
            "release notes for the other platforms" >&2
        exit 1
        ;;
esac
target_dir=${CARGO_TARGET_DIR:-$root/target}
dist=$target_dir/dist
work=$target_dir/dist-work
tools=$target_dir/dist-tools
bin_dir=$target_dir/$triple/$profile

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[[ -n $version ]] || { echo "no [workspace.package] version in Cargo.toml" >&2; exit 1; }
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
echo "== YieldShell $version for $triple (profile $profile, glibc $glibc)"

# -- tools ------------------------------------------------------------------------------------
# Pinned so a rebuild uses the same linker and packager; bump them deliberately.
tool_pins=(maturin==1.16.0 ziglang==0.17.1)
if ! "$tools/bin/python" -m pip show --quiet "${tool_pins[@]%%==*}" >/dev/null 2>&1 ||
    [[ $(cat "$tools/pins" 2>/dev/null) != "${tool_pins[*]}" ]]; then
    echo "== installing ${tool_pins[*]} into $tools"
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "${tool_pins[@]}"
    echo "${tool_pins[*]}" >"$tools/pins"
fi
# maturin finds zig as `python3 -m ziglang` through the venv's python.
export PATH=$tools/bin:$PATH
# The standard libraries of the macOS targets (a no-op when present).
for entry in "${macos_targets[@]}"; do
    mac_triple=${entry%%:*}
    if ! rustup target list --installed 2>/dev/null | grep -qx "$mac_triple"; then
        rustup target add "$mac_triple"
    fi
done

rm -rf "$dist" "$work"
mkdir -p "$dist" "$work"

# Every binary is built by `maturin --zig`, which links against the glibc of the manylinux tag.
# One linker for all three matters: cargo fingerprints the linker, so building the daemon with
# cargo-zigbuild and the shim with maturin (each with its own zig wrapper) would rebuild every
# shared dependency on each switch.
zig_build() { # wheel directory, then maturin's other arguments
    local out=$1
    shift
    maturin build --locked --profile "$profile" --target "$triple" --zig \
        --compatibility "manylinux_${glibc/./_}" --out "$out" "$@"
}

# -- binaries ---------------------------------------------------------------------------------
# The daemon and the CLI first, as throwaway wheels (only their binaries are used); maturin
# builds the shim below, into the same target directory.
echo "== building yieldshelld (with yieldshell-holder) and yieldctl"
mkdir -p "$work/bins"
for crate in daemon cli; do
    (cd "$work/bins" && zig_build . --bindings bin --manifest-path "$root/$crate/Cargo.toml")
done

# -- wheel ------------------------------------------------------------------------------------
echo "== building the wheel (maturin, mcp-yieldshell)"
py=$work/python
mkdir -p "$py/data/scripts"
install -m 0755 "$bin_dir/yieldshelld" "$bin_dir/yieldshell-holder" "$bin_dir/yieldctl" "$py/data/scripts/"
sed -e "s|@MANIFEST@|$root/shim/Cargo.toml|" -e "s|@DATA@|$py/data|" \
    packaging/python/pyproject.toml >"$py/pyproject.toml"
cp README.md "$py/"
# From the staged pyproject.toml, which names the shim's manifest and the data directory.
(cd "$py" && zig_build "$dist")

# -- glibc check ------------------------------------------------------------------------------
newest_glibc() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1
}
for b in mcp-yieldshell yieldshelld yieldshell-holder yieldctl; do
    need=$(newest_glibc "$bin_dir/$b")
    if [[ $(printf '%s\n' "$need" "$glibc" | sort -V | tail -n 1) != "$glibc" ]]; then
        echo "$b needs GLIBC_$need, newer than the $glibc this release promises" >&2
        exit 1
    fi
    echo "   $b: newest glibc symbol GLIBC_$need"
done

# -- tarball ----------------------------------------------------------------------------------
echo "== building the tarball"
name=yieldshell-$version-$triple
stage=$work/$name
mkdir -p "$stage/bin" "$stage/share/man/man1" "$stage/share/yieldshell" \
    "$stage/share/bash-completion/completions" "$stage/share/zsh/site-functions" \
    "$stage/share/fish/vendor_completions.d"
install -m 0755 "$bin_dir/mcp-yieldshell" "$bin_dir/yieldshelld" "$bin_dir/yieldshell-holder" "$bin_dir/yieldctl" "$stage/bin/"
"$stage/bin/yieldctl" man --dir "$stage/share/man/man1" >/dev/null
"$stage/bin/yieldctl" completions bash >"$stage/share/bash-completion/completions/yieldctl"
"$stage/bin/yieldctl" completions zsh >"$stage/share/zsh/site-functions/_yieldctl"
"$stage/bin/yieldctl" completions fish >"$stage/share/fish/vendor_completions.d/yieldctl.fish"
cp -r packaging/systemd packaging/launchd "$stage/share/yieldshell/"
cp README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$stage/"
cp packaging/README.md "$stage/share/yieldshell/INSTALL.md"
# Same inputs, same bytes: sorted entries, fixed owner and times, no gzip timestamp.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    --mode='u+rwX,go+rX,go-w' -C "$work" -cf - "$name" | gzip -n -9 >"$dist/$name.tar.gz"
(cd "$dist" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")

# -- npm --------------------------------------------------------------------------------------
echo "== building the npm packages"
set_json() { # file, then python statements on `p` (the parsed package.json)
    python3 - "$1" "$2" <<'PY'
import json, sys
path, code = sys.argv[1], sys.argv[2]
with open(path) as f:
    p = json.load(f)
exec(code)
with open(path, "w") as f:
    json.dump(p, f, indent=2)
    f.write("\n")
PY
}
npm_os=${npm_platform%-*}
npm_cpu=${npm_platform#*-}
plat=$work/npm/$npm_platform
mkdir -p "$plat/bin"
cp packaging/npm/platform/package.json "$plat/"
set_json "$plat/package.json" "p['name'] = '@yieldshell/$npm_platform'; p['version'] = '$version'
p['os'] = ['$npm_os']; p['cpu'] = ['$npm_cpu']"
install -m 0755 "$bin_dir/mcp-yieldshell" "$bin_dir/yieldshelld" "$bin_dir/yieldshell-holder" "$bin_dir/yieldctl" "$plat/bin/"
cp LICENSE-MIT LICENSE-APACHE "$plat/"
npm_dirs=("$plat")

# -- macOS ------------------------------------------------------------------------------------
# The same wheel, tarball and npm platform package per macOS target, from binaries built by
# `maturin --zig` as above (its zig wrapper is also the C compiler of psm, pulled in by the shell
# parser). Man pages and completions come from the Linux stage: generating them needs a running
# yieldctl, and they are the same text.
# A binary passes if it is a 64-bit Mach-O executable of its architecture, asks for no newer
# macOS than promised (its load commands' minimum version), and, for arm64, carries a code
# signature (ad hoc, from zig's linker): Apple silicon kills an unsigned arm64 binary at exec
# (x86_64 binaries need none, on Intel or under Rosetta). Prints the minimum.
mach_o_check() { # binary, Mach-O architecture (arm64 or x86_64), minimum macOS (11.0)
    python3 - "$@" <<'PY'
import struct, sys
path, arch, promised = sys.argv[1], sys.argv[2], sys.argv[3]
want = {"arm64": 0x0100000C, "x86_64": 0x01000007}[arch]  # CPU_TYPE_ARM64, CPU_TYPE_X86_64
data = open(path, "rb").read()
magic, cputype, _, filetype, ncmds = struct.unpack_from("<IIIII", data)
if (magic, cputype, filetype) != (0xFEEDFACF, want, 2):  # MH_MAGIC_64, MH_EXECUTE
    sys.exit(f"{path}: not a 64-bit Mach-O executable for {arch} "
             f"(magic {magic:#x}, cputype {cputype:#x}, filetype {filetype})")
minos, signed, at = None, False, 32
for _ in range(ncmds):
    cmd, size = struct.unpack_from("<II", data, at)
    # LC_BUILD_VERSION (platform, minos), or before macOS 10.14 LC_VERSION_MIN_MACOSX
    # (version); both encode the version as xxxx.yy.zz.
    if cmd in (0x32, 0x24):
        v = struct.unpack_from("<I", data, at + (12 if cmd == 0x32 else 8))[0]
        minos = (v >> 16, (v >> 8) & 0xFF)
    signed |= cmd == 0x1D  # LC_CODE_SIGNATURE
    at += size
limit = tuple(int(p) for p in promised.split("."))
if minos is None or minos > limit:
    sys.exit(f"{path}: needs macOS {minos}, newer than the {promised} this release promises")
if arch == "arm64" and not signed:
    sys.exit(f"{path}: no code signature (Apple silicon refuses to run it)")
print(f"{minos[0]}.{minos[1]}")
PY
}
for entry in "${macos_targets[@]}"; do
    IFS=: read -r mac_triple mac_npm mac_arch mac_min <<<"$entry"
    echo "== building for $mac_triple (macOS $mac_min or newer)"
    export MACOSX_DEPLOYMENT_TARGET=$mac_min
    mac_bins=$target_dir/$mac_triple/$profile
    mac_build() { # wheel directory, then maturin's other arguments
        local out=$1
        shift
        maturin build --locked --profile "$profile" --target "$mac_triple" --zig --out "$out" "$@"
    }
    mkdir -p "$work/bins-$mac_triple"
    for crate in daemon cli; do
        (cd "$work/bins-$mac_triple" &&
            mac_build . --bindings bin --manifest-path "$root/$crate/Cargo.toml")
    done
    mac_py=$work/python-$mac_triple
    mkdir -p "$mac_py/data/scripts"
    install -m 0755 "$mac_bins/yieldshelld" "$mac_bins/yieldshell-holder" "$mac_bins/yieldctl" \
        "$mac_py/data/scripts/"
    sed -e "s|@MANIFEST@|$root/shim/Cargo.toml|" -e "s|@DATA@|$mac_py/data|" \
        packaging/python/pyproject.toml >"$mac_py/pyproject.toml"
    cp README.md "$mac_py/"
    (cd "$mac_py" && mac_build "$dist")
    unset MACOSX_DEPLOYMENT_TARGET
    for b in mcp-yieldshell yieldshelld yieldshell-holder yieldctl; do
        needs=$(mach_o_check "$mac_bins/$b" "$mac_arch" "$mac_min")
        echo "   $b: Mach-O 64-bit $mac_arch for macOS $needs or newer"
    done

    mac_name=yieldshell-$version-$mac_triple
    mac_stage=$work/$mac_name
    mkdir -p "$mac_stage/bin"
    install -m 0755 "$mac_bins/mcp-yieldshell" "$mac_bins/yieldshelld" \
        "$mac_bins/yieldshell-holder" "$mac_bins/yieldctl" "$mac_stage/bin/"
    cp -r "$stage/share" "$mac_stage/"
    cp README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$mac_stage/"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
        --mode='u+rwX,go+rX,go-w' -C "$work" -cf - "$mac_name" | gzip -n -9 >"$dist/$mac_name.tar.gz"
    (cd "$dist" && sha256sum "$mac_name.tar.gz" >"$mac_name.tar.gz.sha256")

    mac_plat=$work/npm/$mac_npm
    mkdir -p "$mac_plat/bin"
    cp packaging/npm/platform/package.json "$mac_plat/"
    set_json "$mac_plat/package.json" "p['name'] = '@yieldshell/$mac_npm'; p['version'] = '$version'
p['os'] = ['${mac_npm%-*}']; p['cpu'] = ['${mac_npm#*-}']"
    cp "$mac_stage/bin/"* "$mac_plat/bin/"
    cp LICENSE-MIT LICENSE-APACHE "$mac_plat/"
    npm_dirs+=("$mac_plat")
done

launcher=$work/npm/yieldshell
cp -r packaging/npm/yieldshell "$launcher"
cp README.md LICENSE-MIT LICENSE-APACHE "$launcher/"
set_json "$launcher/package.json" "p['version'] = '$version'
p['optionalDependencies'] = {k: '$version' for k in p['optionalDependencies']}"
(cd "$dist" && npm pack --silent "${npm_dirs[@]}" "$launcher" >/dev/null)

(cd "$dist" && sha256sum -- *.tar.gz *.whl *.tgz >SHA256SUMS)
echo "== $dist"
(cd "$dist" && ls -l)
