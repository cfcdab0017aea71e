#!/usr/bin/env bash
# Builds every artifact of a YieldShell release into target/dist/ (or $CARGO_TARGET_DIR/dist/),
# from a clean clone, with nothing but crates.io, PyPI and npm, for this Linux machine's
# architecture and for macOS (Apple silicon and Intel):
#
#   yieldshell-<version>-<target>.tar.gz (+ .sha256)  the binaries, units, completions,
#                                                     man pages, licenses, README, CHANGELOG
#   yieldshell-<version>-py3-none-manylinux_2_28_<arch>.whl   `pip install` / `uvx` / `pipx`
#   yieldshell-<version>-py3-none-macosx_11_0_arm64.whl, ...-macosx_10_12_x86_64.whl
#   yieldshell-<version>-x86_64-pc-windows-gnu.zip (+ .sha256)   the Windows .exe files, licenses,
#                                                     README, CHANGELOG
#   yieldshell-<version>-py3-none-win_amd64.whl       the same, for pip on Windows
#   yieldshell-<version>.tgz, yieldshell-<os>-<cpu>-<version>.tgz   npm launcher + one package
#                                                     per platform (linux-*, darwin-arm64/-x64,
#                                                     win32-x64)
#   SHA256SUMS                                        every file above
#
# The Linux binaries are linked by zig against glibc 2.28 (manylinux_2_28), so they run on any
# glibc-based distribution from 2018 on, whatever this machine's glibc is; the script refuses a
# binary that needs a newer symbol. The macOS binaries are cross-compiled and linked by zig too
# (against the macOS SDK stubs zig ships: libSystem only, no framework is needed), for macOS 11
# (arm64) and 10.12 (x86_64), Rust's minimums; the script refuses a binary that is not a Mach-O
# of its architecture. Nothing can run them here: their man pages and completions are the Linux
# build's (the same text). The Windows binaries (x86_64-pc-windows-gnu) are built by cargo and
# linked by mingw (`x86_64-w64-mingw32-gcc`, Debian's gcc-mingw-w64-x86-64, which must be
# installed); the script refuses one that is not a PE executable for x86-64 or that imports a
# DLL Windows does not have (mingw's runtime DLLs). The tools (maturin, ziglang) come from PyPI
# into a venv under the target directory, pinned, so two runs use the same ones.
#
# Environment:
#   YIELDSHELL_DIST_PROFILE  cargo profile: `dist-publish` (default; fat LTO, what is published) or
#                            `dist-check` (no LTO: what CI builds to check the pipeline)
#   YIELDSHELL_DIST_MACOS    `0` skips the macOS artifacts (a quicker local run); default `1`
#   YIELDSHELL_DIST_WINDOWS  `0` skips the Windows artifacts; default `1`
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
windows_triple=
if [[ ${YIELDSHELL_DIST_WINDOWS:-1} != 0 ]]; then
    windows_triple=x86_64-pc-windows-gnu
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
# The standard libraries of the macOS and Windows targets (a no-op when present).
for cross_triple in "${macos_targets[@]%%:*}" ${windows_triple:+"$windows_triple"}; do
    if ! rustup target list --installed 2>/dev/null | grep -qx "$cross_triple"; then
        rustup target add "$cross_triple"
    fi
done
if [[ -n $windows_triple ]] && ! command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; then
    echo "the Windows build needs the mingw linker x86_64-w64-mingw32-gcc (Debian:" \
        "gcc-mingw-w64-x86-64); install it or set YIELDSHELL_DIST_WINDOWS=0" >&2
    exit 1
fi

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

# -- Windows ----------------------------------------------------------------------------------
# A zip (what Windows users unpack), a win_amd64 wheel and the npm package win32-x64, all three
# holding the same .exe files, which cargo builds with the mingw linker (psm's stack switching is
# assembly on this target: no zig). The build is exactly `.ci/test-extra`'s Windows build (same command,
# same environment: without SOURCE_DATE_EPOCH, which psm's build script tracks), so in CI, same
# profile, it finds everything built and these are the binaries the Wine tests ran.
# The wheel is not built by maturin: maturin would compile the shim on its own, with the shim's
# features only (cargo unifies features across the packages of one build), so every shared
# dependency twice, and ship a shim other than the one tested. It is assembled here instead
# (the layout maturin gives the other wheels: the three .exe as scripts, which pip puts side by
# side into `Scripts\`), with the METADATA maturin wrote for the Linux wheel (the same
# pyproject.toml and README).
# There are no holders on Windows (processes end with the daemon): yieldshell-holder.exe, a stub
# that says so, is not shipped. Nothing Windows runs here: the Wine tests in tests/e2e run them.
# A binary passes if it is a PE32+ console executable for x86-64 that imports no DLL outside
# Windows (the `lib*.dll` of mingw's C and thread runtimes, which a Windows machine lacks, are
# the usual mistake).
pe_check() { # binary
    local described
    described=$(objdump -p "$1")
    grep -q 'file format pei-x86-64' <<<"$described" &&
        grep -Eq '^Magic[[:space:]]+020b' <<<"$described" &&
        grep -Eq '^Subsystem[[:space:]]+00000003' <<<"$described" || {
        echo "$1: not a PE32+ console executable for x86-64" >&2
        return 1
    }
    if grep -Ei 'DLL Name: lib' <<<"$described" >&2; then
        echo "$1: imports a DLL that is not part of Windows (above)" >&2
        return 1
    fi
}
# Zips what is under a directory, paths relative to it: same inputs, same bytes (sorted entries,
# every time SOURCE_DATE_EPOCH, .exe files 0755).
write_zip() { # directory, zip file
    python3 - "$1" "$2" <<'PY'
import os, sys, time, zipfile
root, out = sys.argv[1:]
stamp = time.gmtime(max(int(os.environ["SOURCE_DATE_EPOCH"]), 315532800))[:6]  # zip: >= 1980
paths = sorted(
    os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
    for d, _, files in os.walk(root) for f in files)
with zipfile.ZipFile(out, "w") as z:
    for rel in paths:
        info = zipfile.ZipInfo(rel, stamp)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (0o100755 if rel.endswith(".exe") else 0o100644) << 16
        with open(os.path.join(root, rel), "rb") as f:
            z.writestr(info, f.read(), compresslevel=9)
PY
}
if [[ -n $windows_triple ]]; then
    echo "== building for $windows_triple (mingw)"
    env -u SOURCE_DATE_EPOCH cargo build --locked --profile "$profile" --target "$windows_triple" \
        --workspace --exclude yieldshell-tests --exclude yieldshell-bench --bins
    win_bins=$target_dir/$windows_triple/$profile
    win_exes=(mcp-yieldshell.exe yieldshelld.exe yieldctl.exe)
    for b in "${win_exes[@]}"; do
        pe_check "$win_bins/$b"
        echo "   $b: PE32+ x86-64 console executable, Windows DLLs only"
    done

    win_name=yieldshell-$version-$windows_triple
    win_stage=$work/zip/$win_name
    mkdir -p "$win_stage/bin" "$win_stage/share/yieldshell"
    for b in "${win_exes[@]}"; do
        install -m 0755 "$win_bins/$b" "$win_stage/bin/"
    done
    cp README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$win_stage/"
    cp packaging/README.md "$win_stage/share/yieldshell/INSTALL.md"
    write_zip "$work/zip" "$dist/$win_name.zip"
    (cd "$dist" && sha256sum "$win_name.zip" >"$win_name.zip.sha256")

    echo "== assembling the win_amd64 wheel"
    win_wheel=$work/wheel-$windows_triple
    mkdir -p "$win_wheel/yieldshell-$version.data/scripts" "$win_wheel/yieldshell-$version.dist-info"
    cp "$win_stage/bin/"*.exe "$win_wheel/yieldshell-$version.data/scripts/"
    linux_wheel=("$dist/yieldshell-$version-py3-none-manylinux_"*.whl)
    python3 - "$win_wheel" "$version" "${linux_wheel[0]}" <<'PY'
import base64, hashlib, os, sys, zipfile
root, version, linux_wheel = sys.argv[1:]
info = f"yieldshell-{version}.dist-info"
with zipfile.ZipFile(linux_wheel) as z:
    metadata = z.read(f"{info}/METADATA")
with open(os.path.join(root, info, "METADATA"), "wb") as f:
    f.write(metadata)
with open(os.path.join(root, info, "WHEEL"), "w") as f:
    f.write("Wheel-Version: 1.0\nGenerator: yieldshell release.sh\n"
            "Root-Is-Purelib: false\nTag: py3-none-win_amd64\n")
record = []
for d, _, files in os.walk(root):
    for name in files:
        path = os.path.join(d, name)
        data = open(path, "rb").read()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{os.path.relpath(path, root)},sha256={digest},{len(data)}")
record.append(f"{info}/RECORD,,")
with open(os.path.join(root, info, "RECORD"), "w") as f:
    f.write("\n".join(sorted(record)) + "\n")
PY
    write_zip "$win_wheel" "$dist/yieldshell-$version-py3-none-win_amd64.whl"

    win_plat=$work/npm/win32-x64
    mkdir -p "$win_plat/bin"
    cp packaging/npm/platform/package.json "$win_plat/"
    set_json "$win_plat/package.json" "p['name'] = '@yieldshell/win32-x64'; p['version'] = '$version'
p['os'] = ['win32']; p['cpu'] = ['x64']
p['description'] = 'The YieldShell binaries (mcp-yieldshell.exe, yieldshelld.exe, yieldctl.exe) for Windows x64; installed by the yieldshell package'"
    cp "$win_stage/bin/"*.exe "$win_plat/bin/"
    cp LICENSE-MIT LICENSE-APACHE "$win_plat/"
    npm_dirs+=("$win_plat")
fi

launcher=$work/npm/yieldshell
cp -r packaging/npm/yieldshell "$launcher"
cp README.md LICENSE-MIT LICENSE-APACHE "$launcher/"
set_json "$launcher/package.json" "p['version'] = '$version'
p['optionalDependencies'] = {k: '$version' for k in p['optionalDependencies']}"
(cd "$dist" && npm pack --silent "${npm_dirs[@]}" "$launcher" >/dev/null)

# (nullglob: no .zip when YIELDSHELL_DIST_WINDOWS=0)
(cd "$dist" && shopt -s nullglob && sha256sum -- *.tar.gz *.zip *.whl *.tgz >SHA256SUMS)
echo "== $dist"
(cd "$dist" && ls -l)
