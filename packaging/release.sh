#!/usr/bin/env bash
# Builds every artifact of a YieldShell release into target/dist/ (or $CARGO_TARGET_DIR/dist/),
# from a clean clone, with nothing but crates.io, PyPI and npm:
#
#   yieldshell-<version>-<target>.tar.gz (+ .sha256)  the binaries, units, completions,
#                                                     man pages, licenses, README, CHANGELOG
#   yieldshell-<version>-py3-none-manylinux_2_28_<arch>.whl   `pip install` / `uvx` / `pipx`
#   yieldshell-<version>.tgz, yieldshell-<os>-<cpu>-<version>.tgz   npm launcher + platform package
#   SHA256SUMS                                        every file above
#
# The Linux binaries are linked by zig against glibc 2.28 (manylinux_2_28), so they run on any
# glibc-based distribution from 2018 on, whatever this machine's glibc is; the script refuses a
# binary that needs a newer symbol. The tools (maturin, ziglang) come from PyPI into a venv under
# the target directory, pinned, so two runs use the same ones.
#
# Environment:
#   YIELDSHELL_DIST_PROFILE  cargo profile: `dist-publish` (default; fat LTO, what is published) or
#                            `dist-check` (no LTO: what CI builds to check the pipeline)
#   SOURCE_DATE_EPOCH        timestamp of the tarball's files (default: the last commit's)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

profile=${YIELDSHELL_DIST_PROFILE:-dist-publish}
glibc=2.28
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
launcher=$work/npm/yieldshell
cp -r packaging/npm/yieldshell "$launcher"
cp README.md LICENSE-MIT LICENSE-APACHE "$launcher/"
set_json "$launcher/package.json" "p['version'] = '$version'
p['optionalDependencies'] = {k: '$version' for k in p['optionalDependencies']}"
(cd "$dist" && npm pack --silent "$plat" "$launcher" >/dev/null)

(cd "$dist" && sha256sum -- *.tar.gz *.whl *.tgz >SHA256SUMS)
echo "== $dist"
(cd "$dist" && ls -l)
