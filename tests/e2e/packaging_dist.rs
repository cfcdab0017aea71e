//! The release artifacts that `packaging/release.sh` writes to `target/dist/`, installed as a
//! user installs them: the tarball (contents, checksums, unpacked and run), the wheel in a clean
//! venv, the npm packages with `npm install` in an empty directory; each installed
//! `mcp-yieldshell` is driven by a real MCP client (`tools/list`, an `exec`) and must start the
//! daemon its package put beside it. And no binary needs a glibc newer than 2.28.
//!
//! The macOS and Windows artifacts are checked for what this Linux machine can see: names, tags,
//! checksums, contents, headers (Mach-O, PE32+ and its DLL imports). The Windows zip goes
//! further: its `mcp-yieldshell.exe` serves a real MCP client under Wine (the Wine driving of
//! `windows_wine`) and starts the zip's daemon; the wheel and the npm package hold the same
//! bytes, pip is asked to install the wheel as for `win_amd64`, and the npm launcher's choice is
//! run with node told it is on `win32 x64`. Not run anywhere: Windows itself, `pip`/`pipx`/`uvx`
//! and `npm`/`npx` installs on Windows, the launcher spawning an `.exe` under Windows' node.
//!
//! They need the artifacts, which take minutes to build, so they are `#[ignore]`d in the normal
//! suite: `.ci/test-extra dist` runs `release.sh` (the quick `dist-check` profile) and then these,
//! with `cargo test -p yieldshell-tests --test e2e -- --ignored packaging_dist::`.
//! `YIELDSHELL_DIST_DIR` points them at another directory of artifacts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;

use crate::helper::{
    TestDaemon, bin, eventually_blocking, installed_shim_command, require_tool, run, serve_one_exec,
};
use crate::mcp::{Mcp, body};
use crate::windows_wine::{self, Finish};

/// Where the artifacts are: `$YIELDSHELL_DIST_DIR`, else `dist/` in this build's target dir.
fn dist_dir() -> PathBuf {
    let dir = std::env::var_os("YIELDSHELL_DIST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            bin("yieldctl")
                .parent()
                .and_then(Path::parent)
                .expect("target dir")
                .join("dist")
        });
    assert!(
        dir.is_dir(),
        "{} is missing: run `packaging/release.sh` first",
        dir.display()
    );
    dir
}

/// The one artifact in the dist dir whose name starts with `prefix` and ends with `suffix`.
fn artifact(prefix: &str, suffix: &str) -> PathBuf {
    let dir = dist_dir();
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read dist dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one {prefix}*{suffix} in {}: {found:?}",
        dir.display()
    );
    found.into_iter().next().expect("one")
}

/// `yieldshell-<version>-<target>`: the tarball's name and its top directory.
fn tarball_stem() -> String {
    let arch = std::env::consts::ARCH;
    format!(
        "yieldshell-{}-{arch}-unknown-linux-gnu",
        yieldshell_proto::VERSION
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `cmd` to completion; fails the test with its output unless it succeeded.
fn ok(cmd: &mut Command) -> String {
    let out = run(cmd.stdin(Stdio::null()));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Unpacks the tarball into a fresh directory; returns it and the unpacked top directory.
fn unpacked_tarball() -> (tempfile::TempDir, PathBuf) {
    let dir = TestDaemon::new_dir();
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(artifact(&tarball_stem(), ".tar.gz"))
        .arg("-C")
        .arg(dir.path()));
    let top = dir.path().join(tarball_stem());
    (dir, top)
}

#[test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
fn the_tarball_matches_its_checksums_and_holds_the_release() {
    let dist = dist_dir();
    let name = format!("{}.tar.gz", tarball_stem());
    ok(Command::new("sha256sum")
        .args(["--check", "--strict", &format!("{name}.sha256")])
        .current_dir(&dist));
    let sums = ok(Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&dist));
    for kind in [".tar.gz: OK", ".whl: OK", ".tgz: OK"] {
        assert!(sums.contains(kind), "SHA256SUMS covers no {kind}: {sums}");
    }
    let listing = ok(Command::new("tar").arg("-tzvf").arg(dist.join(&name)));
    let stem = tarball_stem();
    for path in [
        "bin/mcp-yieldshell",
        "bin/yieldshelld",
        "bin/yieldshell-holder",
        "bin/yieldctl",
        "share/man/man1/yieldctl.1",
        "share/man/man1/yieldctl-exec.1",
        "share/bash-completion/completions/yieldctl",
        "share/zsh/site-functions/_yieldctl",
        "share/fish/vendor_completions.d/yieldctl.fish",
        "share/yieldshell/systemd/yieldshelld.service",
        "share/yieldshell/systemd/yieldshelld.socket",
        "share/yieldshell/launchd/dev.yieldshell.yieldshelld.plist",
        "share/yieldshell/INSTALL.md",
        "README.md",
        "CHANGELOG.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" {stem}/{path}")))
            .unwrap_or_else(|| panic!("{path} missing from {name}:\n{listing}"));
        // Reproducible and installable by anyone: owned by 0:0, binaries executable.
        assert!(line.contains(" 0/0 "), "{line}");
        if path.starts_with("bin/") {
            assert!(line.starts_with("-rwxr-xr-x"), "{line}");
        }
    }
}

#[tokio::test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
async fn the_unpacked_tarball_serves_mcp_with_its_own_daemon() {
    let (_dir, top) = unpacked_tarball();
    let version = format!(
        "{} (protocol {})",
        yieldshell_proto::VERSION,
        yieldshell_proto::PROTOCOL_VERSION
    );
    for name in ["mcp-yieldshell", "yieldshelld", "yieldctl"] {
        let printed = ok(Command::new(top.join("bin").join(name)).arg("--version"));
        assert_eq!(printed, format!("{name} {version}\n"));
    }
    let d = TestDaemon::unstarted();
    let cmd = installed_shim_command(&top.join("bin/mcp-yieldshell"), &[], &d);
    assert_eq!(serve_one_exec(cmd, &d).await, top.join("bin/yieldshelld"));
}

/// The newest `GLIBC_x.y` version that `binary`'s dynamic symbols need.
fn newest_glibc(binary: &Path) -> (u32, u32) {
    let objdump = require_tool("objdump", "binutils");
    let symbols = ok(Command::new(objdump).arg("-T").arg(binary));
    symbols
        .split("GLIBC_")
        .skip(1)
        .filter_map(|rest| {
            let v: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max()
        .unwrap_or_else(|| panic!("{} names no GLIBC_ symbol", binary.display()))
}

#[test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
fn no_binary_needs_a_glibc_newer_than_2_28() {
    let (_dir, top) = unpacked_tarball();
    for name in [
        "mcp-yieldshell",
        "yieldshelld",
        "yieldshell-holder",
        "yieldctl",
    ] {
        let newest = newest_glibc(&top.join("bin").join(name));
        assert!(
            newest <= (2, 28),
            "{name} needs GLIBC_{}.{}",
            newest.0,
            newest.1
        );
    }
    // The check can fail: this machine's own build of the same code needs a newer glibc.
    let host = newest_glibc(&bin("yieldctl"));
    assert!(host > (2, 28), "the host build needs only GLIBC_{host:?}");
}

#[tokio::test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
async fn the_wheel_installs_into_a_clean_venv_and_serves_mcp() {
    let python = require_tool("python3", "python3");
    let wheel = artifact(
        &format!(
            "yieldshell-{}-py3-none-manylinux_2_28_",
            yieldshell_proto::VERSION
        ),
        ".whl",
    );
    let d = TestDaemon::unstarted();
    let venv = d.dir.path().join("venv");
    ok(Command::new(python).args(["-m", "venv"]).arg(&venv));
    let started = Instant::now();
    ok(Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--no-index",
            "--disable-pip-version-check",
        ])
        .arg(&wheel));
    let bin_dir = venv.join("bin");
    for name in [
        "mcp-yieldshell",
        "yieldshelld",
        "yieldshell-holder",
        "yieldctl",
    ] {
        assert!(bin_dir.join(name).is_file(), "{name} not in the venv's bin");
    }
    let cmd = installed_shim_command(&bin_dir.join("mcp-yieldshell"), &[], &d);
    assert_eq!(serve_one_exec(cmd, &d).await, bin_dir.join("yieldshelld"));
    eprintln!(
        "wheel: pip install to an answered tools/list and exec in {:?}",
        started.elapsed()
    );
}

#[tokio::test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
async fn the_npm_packages_install_and_serve_mcp() {
    let npm = require_tool("npm", "npm");
    let version = yieldshell_proto::VERSION;
    let platform = match std::env::consts::ARCH {
        "aarch64" => "linux-arm64",
        _ => "linux-x64",
    };
    let launcher = artifact(&format!("yieldshell-{version}"), ".tgz");
    let native = artifact(&format!("yieldshell-{platform}-{version}"), ".tgz");
    let d = TestDaemon::unstarted();
    let prefix = d.dir.path().join("project");
    std::fs::create_dir(&prefix).expect("mkdir");
    let started = Instant::now();
    // Both tarballs in one install, as a registry would serve them; the other platforms'
    // optional dependencies are skipped by their os/cpu (and are not published from here).
    ok(Command::new(npm)
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--prefix",
        ])
        .arg(&prefix)
        .arg(&native)
        .arg(&launcher)
        .env("npm_config_cache", d.dir.path().join("npm-cache")));
    let shim = prefix.join("node_modules/.bin/mcp-yieldshell");
    let cmd = installed_shim_command(&shim, &[], &d);
    assert_eq!(
        serve_one_exec(cmd, &d).await,
        prefix.join(format!(
            "node_modules/@yieldshell/{platform}/bin/yieldshelld"
        ))
    );
    eprintln!(
        "npm: npm install to an answered tools/list and exec in {:?}",
        started.elapsed()
    );
}

/// A macOS target `release.sh` builds.
struct MacTarget {
    triple: &'static str,
    npm_platform: &'static str,
    wheel_tag: &'static str,
    /// The Mach-O `cputype` of its binaries.
    cputype: u32,
    /// The oldest macOS the release promises (Rust's own minimum for the target).
    min_macos: (u32, u32),
}

const MACOS_TARGETS: [MacTarget; 2] = [
    MacTarget {
        triple: "aarch64-apple-darwin",
        npm_platform: "darwin-arm64",
        wheel_tag: "macosx_11_0_arm64",
        cputype: 0x0100_000C, // CPU_TYPE_ARM64
        min_macos: (11, 0),
    },
    MacTarget {
        triple: "x86_64-apple-darwin",
        npm_platform: "darwin-x64",
        wheel_tag: "macosx_10_12_x86_64",
        cputype: 0x0100_0007, // CPU_TYPE_X86_64
        min_macos: (10, 12),
    },
];

const BINARIES: [&str; 4] = [
    "mcp-yieldshell",
    "yieldshelld",
    "yieldshell-holder",
    "yieldctl",
];

/// What a 64-bit Mach-O executable says of itself in its header and load commands.
#[derive(Debug, PartialEq)]
struct MachO {
    cputype: u32,
    /// The minimum macOS (major, minor) of `LC_BUILD_VERSION` or `LC_VERSION_MIN_MACOSX`.
    min_macos: Option<(u32, u32)>,
    /// Has `LC_CODE_SIGNATURE` (Apple silicon kills an unsigned arm64 binary at exec).
    signed: bool,
}

/// Reads a 64-bit little-endian Mach-O executable (magic `MH_MAGIC_64`, `MH_EXECUTE`); `None`
/// for anything else (an ELF binary, a script).
fn mach_o(binary: &Path) -> Option<MachO> {
    let data = std::fs::read(binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let word = |at: usize| Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?));
    if word(0)? != 0xFEED_FACF || word(12)? != 2 {
        return None;
    }
    let mut found = MachO {
        cputype: word(4)?,
        min_macos: None,
        signed: false,
    };
    let mut at = 32;
    for _ in 0..word(16)? {
        match word(at)? {
            // LC_BUILD_VERSION (platform, minos), or for targets before macOS 10.14
            // LC_VERSION_MIN_MACOSX (version); both encode it as xxxx.yy.zz.
            cmd @ (0x32 | 0x24) => {
                let v = word(at + if cmd == 0x32 { 12 } else { 8 })?;
                found.min_macos = Some((v >> 16, (v >> 8) & 0xFF));
            }
            0x1D => found.signed = true,
            _ => {}
        }
        at += usize::try_from(word(at + 4)?).ok()?;
    }
    Some(found)
}

/// Checks that `dir` holds the four binaries, each a Mach-O for `cputype` that runs on
/// `min_macos`, signed if it is arm64.
fn assert_mach_o_binaries(dir: &Path, cputype: u32, min_macos: (u32, u32), artifact: &str) {
    for name in BINARIES {
        let found = mach_o(&dir.join(name))
            .unwrap_or_else(|| panic!("{name} in {artifact} is not a 64-bit Mach-O executable"));
        assert_eq!(found.cputype, cputype, "{name} in {artifact}");
        // Apple silicon kills an unsigned arm64 binary; x86_64 ones need no signature.
        assert!(
            found.signed || cputype != 0x0100_000C,
            "{name} in {artifact} has no code signature"
        );
        assert!(
            found.min_macos.is_some_and(|m| m <= min_macos),
            "{name} in {artifact} needs macOS {:?}, not {min_macos:?}",
            found.min_macos
        );
    }
}

/// Nothing macOS runs on this machine, so the macOS artifacts are checked for what can be seen
/// without running them: checksums, names (wheel platform tags, npm platforms), contents, and
/// that every binary is a Mach-O of the artifact's architecture for the promised macOS, signed
/// where Apple silicon requires it (and the check itself refuses the Linux build's ELF binaries).
#[test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
fn the_macos_artifacts_hold_mach_o_binaries_of_their_architecture() {
    let version = yieldshell_proto::VERSION;
    let dist = dist_dir();
    let python = require_tool("python3", "python3");
    assert_eq!(mach_o(&bin("yieldctl")), None, "an ELF binary");
    let sums = ok(Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&dist));
    for MacTarget {
        triple,
        npm_platform,
        wheel_tag,
        cputype,
        min_macos,
    } in MACOS_TARGETS
    {
        let unpacked = tempfile::tempdir().expect("tempdir");
        let into = |what: &str| {
            let dir = unpacked.path().join(what);
            std::fs::create_dir(&dir).expect("mkdir");
            dir
        };

        let stem = format!("yieldshell-{version}-{triple}");
        let tarball = artifact(&stem, ".tar.gz");
        ok(Command::new("sha256sum")
            .args(["--check", "--strict", &format!("{stem}.tar.gz.sha256")])
            .current_dir(&dist));
        assert!(sums.contains(&format!("{stem}.tar.gz: OK")), "{sums}");
        let dir = into("tarball");
        ok(Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&dir));
        let top = dir.join(&stem);
        assert_mach_o_binaries(&top.join("bin"), cputype, min_macos, &stem);
        for path in [
            "share/man/man1/yieldctl.1",
            "share/zsh/site-functions/_yieldctl",
            "share/yieldshell/launchd/dev.yieldshell.yieldshelld.plist",
            "share/yieldshell/INSTALL.md",
            "LICENSE-MIT",
        ] {
            assert!(top.join(path).is_file(), "{path} missing from {stem}");
        }

        let wheel = artifact(
            &format!("yieldshell-{version}-py3-none-{wheel_tag}"),
            ".whl",
        );
        let dir = into("wheel");
        ok(Command::new(&python)
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&dir));
        let scripts = dir.join(format!("yieldshell-{version}.data/scripts"));
        assert_mach_o_binaries(&scripts, cputype, min_macos, &wheel.display().to_string());

        let npm = artifact(&format!("yieldshell-{npm_platform}-{version}"), ".tgz");
        assert!(
            sums.contains(&format!("yieldshell-{npm_platform}-{version}.tgz: OK")),
            "{sums}"
        );
        let dir = into("npm");
        ok(Command::new("tar")
            .arg("-xzf")
            .arg(&npm)
            .arg("-C")
            .arg(&dir));
        assert_mach_o_binaries(&dir.join("package/bin"), cputype, min_macos, npm_platform);
        let manifest: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join("package/package.json")).expect("package.json"),
        )
        .expect("json");
        let (os, cpu) = npm_platform.split_once('-').expect("os-cpu");
        assert_eq!(manifest["name"], format!("@yieldshell/{npm_platform}"));
        assert_eq!(manifest["os"], serde_json::json!([os]));
        assert_eq!(manifest["cpu"], serde_json::json!([cpu]));
    }
    // The launcher depends on every platform package built here.
    let dir = tempfile::tempdir().expect("tempdir");
    let launcher = artifact(&format!("yieldshell-{version}"), ".tgz");
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(&launcher)
        .arg("-C")
        .arg(dir.path()));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("package/package.json")).expect("package.json"),
    )
    .expect("json");
    for target in MACOS_TARGETS {
        assert_eq!(
            manifest["optionalDependencies"][format!("@yieldshell/{}", target.npm_platform)],
            version,
            "{manifest}"
        );
    }
}

/// The Windows target `release.sh` builds, and the executables each of its artifacts holds
/// (no `yieldshell-holder.exe`: Windows has no holders).
const WINDOWS_TRIPLE: &str = "x86_64-pc-windows-gnu";
const WINDOWS_BINARIES: [&str; 3] = ["mcp-yieldshell.exe", "yieldshelld.exe", "yieldctl.exe"];

/// What a PE executable says of itself in its headers and import table.
#[derive(Debug, PartialEq)]
struct Pe {
    /// The COFF machine (`0x8664`: x86-64).
    machine: u16,
    /// The optional header's subsystem (3: a console program).
    subsystem: u16,
    /// The DLLs of its import table, as written there.
    dlls: Vec<String>,
}

/// Reads a PE32+ image (`MZ`, `PE\0\0`, optional header magic `0x20b`); `None` for anything
/// else (an ELF binary, a 32-bit PE).
fn pe(binary: &Path) -> Option<Pe> {
    let data = std::fs::read(binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let u16_at = |at: usize| Some(u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?));
    if data.get(..2)? != b"MZ" {
        return None;
    }
    let coff = usize::try_from(u32_at(0x3C)?).ok()? + 4;
    if data.get(coff - 4..coff)? != b"PE\0\0" || u16_at(coff + 20)? != 0x20B {
        return None;
    }
    let optional = coff + 20;
    let section_table = optional + usize::from(u16_at(coff + 16)?);
    // An RVA's file offset, through the section that holds it.
    let offset = |rva: u32| -> Option<usize> {
        (0..usize::from(u16_at(coff + 2)?)).find_map(|i| {
            let s = section_table + i * 40;
            let size = u32_at(s + 8)?.max(u32_at(s + 16)?);
            let (va, raw) = (u32_at(s + 12)?, u32_at(s + 20)?);
            (va..va.saturating_add(size))
                .contains(&rva)
                .then(|| usize::try_from(rva - va + raw).ok())
                .flatten()
        })
    };
    // Data directory 1 (imports) of a PE32+ optional header: 20-byte descriptors, the fourth
    // word the RVA of the DLL's name, ended by a zeroed one.
    let mut descriptor = offset(u32_at(optional + 112 + 8)?)?;
    let mut dlls = Vec::new();
    while let Some(name_rva) = u32_at(descriptor + 12).filter(|&r| r != 0) {
        let start = offset(name_rva)?;
        let len = data.get(start..)?.iter().position(|&b| b == 0)?;
        dlls.push(String::from_utf8_lossy(&data[start..start + len]).into_owned());
        descriptor += 20;
    }
    Some(Pe {
        machine: u16_at(coff)?,
        subsystem: u16_at(optional + 68)?,
        dlls,
    })
}

/// Checks that `dir` holds the Windows executables, each a PE32+ console program for x86-64
/// that imports no DLL outside Windows (mingw's `lib*.dll` runtimes are the usual mistake: a
/// Windows machine has none of them), and no holder.
fn assert_windows_binaries(dir: &Path, artifact: &str) {
    for name in WINDOWS_BINARIES {
        let found = pe(&dir.join(name))
            .unwrap_or_else(|| panic!("{name} in {artifact} is not a PE32+ executable"));
        assert_eq!(found.machine, 0x8664, "{name} in {artifact}: {found:?}");
        assert_eq!(found.subsystem, 3, "{name} in {artifact}: {found:?}");
        // The import table was read: Rust's standard library always imports kernel32.
        assert!(
            found
                .dlls
                .iter()
                .any(|d| d.eq_ignore_ascii_case("kernel32.dll")),
            "{name} in {artifact}: {found:?}"
        );
        assert!(
            !found
                .dlls
                .iter()
                .any(|d| d.to_ascii_lowercase().starts_with("lib")),
            "{name} in {artifact} needs a DLL Windows lacks: {found:?}"
        );
    }
    assert!(
        !dir.join("yieldshell-holder.exe").exists(),
        "{artifact} ships the holder, which Windows does not use"
    );
}

/// `yieldshell-<version>-x86_64-pc-windows-gnu`: the zip's name and its top directory.
fn windows_stem() -> String {
    format!("yieldshell-{}-{WINDOWS_TRIPLE}", yieldshell_proto::VERSION)
}

/// Every file under `dir`, as `/`-separated paths relative to it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let rel = path.strip_prefix(dir).expect("under dir");
                found.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    found
}

/// Extracts a zip (the Windows release, a wheel) into a fresh directory with Python's
/// `zipfile`, the module pip itself unpacks wheels with.
fn unzipped(zip: &Path) -> tempfile::TempDir {
    let python = require_tool("python3", "python3");
    let dir = TestDaemon::new_dir();
    ok(Command::new(python)
        .args(["-m", "zipfile", "-e"])
        .arg(zip)
        .arg(dir.path()));
    dir
}

/// Checks that the executables in `dir` are byte for byte the Windows release's (the zip's,
/// unpacked at `zip_bin`): what the Wine test runs from the zip is what the other packages ship.
fn assert_same_executables(dir: &Path, zip_bin: &Path, artifact: &str) {
    for name in WINDOWS_BINARIES {
        let (theirs, zips) = (dir.join(name), zip_bin.join(name));
        assert!(
            std::fs::read(&theirs).expect("read") == std::fs::read(&zips).expect("read"),
            "{name} in {artifact} differs from the zip's"
        );
    }
}

#[test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
fn the_windows_zip_matches_its_checksums_and_holds_windows_executables() {
    let dist = dist_dir();
    let stem = windows_stem();
    ok(Command::new("sha256sum")
        .args(["--check", "--strict", &format!("{stem}.zip.sha256")])
        .current_dir(&dist));
    let sums = ok(Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&dist));
    assert!(sums.contains(&format!("{stem}.zip: OK")), "{sums}");
    assert_eq!(pe(&bin("yieldctl")), None, "an ELF binary");

    let dir = unzipped(&artifact(&stem, ".zip"));
    let expected: Vec<String> = [
        "CHANGELOG.md",
        "LICENSE-APACHE",
        "LICENSE-MIT",
        "README.md",
        "bin/mcp-yieldshell.exe",
        "bin/yieldctl.exe",
        "bin/yieldshelld.exe",
        "share/yieldshell/INSTALL.md",
    ]
    .iter()
    .map(|p| format!("{stem}/{p}"))
    .collect();
    assert_eq!(files_under(dir.path()), expected);
    assert_windows_binaries(&dir.path().join(&stem).join("bin"), &stem);
}

#[test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
fn the_windows_wheel_is_for_win_amd64_and_pip_installs_it_for_windows() {
    let version = yieldshell_proto::VERSION;
    let wheel = artifact(&format!("yieldshell-{version}-py3-none-win_amd64"), ".whl");
    let unpacked = unzipped(&wheel);
    let wheel_meta = std::fs::read_to_string(
        unpacked
            .path()
            .join(format!("yieldshell-{version}.dist-info/WHEEL")),
    )
    .expect("WHEEL");
    assert!(
        wheel_meta.lines().any(|l| l == "Tag: py3-none-win_amd64"),
        "{wheel_meta}"
    );
    // release.sh assembles this wheel itself: its RECORD must list every file with its digest
    // and size, as the wheel format requires (and as `pip` and PyPI read it).
    let python = require_tool("python3", "python3");
    let record_check = r#"
import base64, csv, hashlib, io, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
rows = {r[0]: r[1:] for r in csv.reader(io.StringIO(z.read(record).decode()))}
assert set(rows) == set(z.namelist()), (sorted(rows), z.namelist())
for name, (digest, size) in rows.items():
    if name == record:
        continue
    data = z.read(name)
    want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert (digest, size) == (want, str(len(data))), (name, digest, size)
print(len(rows))
"#;
    let listed = ok(Command::new(&python).args(["-c", record_check]).arg(&wheel));
    assert_eq!(
        listed.trim(),
        "6",
        "RECORD rows: three .exe, METADATA, WHEEL, RECORD"
    );
    let scripts = unpacked
        .path()
        .join(format!("yieldshell-{version}.data/scripts"));
    assert_windows_binaries(&scripts, "the wheel");
    let zip = unzipped(&artifact(&windows_stem(), ".zip"));
    assert_same_executables(
        &scripts,
        &zip.path().join(windows_stem()).join("bin"),
        "the wheel",
    );

    // pip as on Windows: told the platform is win_amd64, it accepts the wheel and puts the
    // three executables side by side (`--target`'s `bin`, `Scripts\` in a Windows environment);
    // told it is Linux, it refuses it. Not run: pip on Windows itself.
    let d = TestDaemon::unstarted();
    let venv = d.dir.path().join("venv");
    ok(Command::new(python).args(["-m", "venv"]).arg(&venv));
    let pip_for = |platform: &str, into: &Path| {
        run(Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                "--platform",
                platform,
                "--target",
            ])
            .arg(into)
            .arg(&wheel)
            .stdin(Stdio::null()))
    };
    let windows = d.dir.path().join("windows");
    let out = pip_for("win_amd64", &windows);
    assert!(out.status.success(), "{out:?}");
    assert_windows_binaries(&windows.join("bin"), "the wheel installed by pip");
    let out = pip_for("manylinux_2_28_x86_64", &d.dir.path().join("linux"));
    assert!(
        !out.status.success() && text(&out.stderr).contains("not a supported wheel"),
        "pip installed a win_amd64 wheel for Linux: {out:?}"
    );
}

#[test]
#[ignore = "needs the release artifacts (target/dist): run .ci/test-extra dist"]
fn the_windows_npm_package_is_for_win32_x64_and_the_launcher_picks_it() {
    let node = require_tool("node", "nodejs");
    let version = yieldshell_proto::VERSION;
    let sums = ok(Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(dist_dir()));
    assert!(
        sums.contains(&format!("yieldshell-win32-x64-{version}.tgz: OK")),
        "{sums}"
    );
    // Laid out as npm installs them into node_modules (npm itself skips a win32 package here).
    let project = TestDaemon::new_dir();
    let modules = project.path().join("node_modules");
    for (tgz, into) in [
        (
            artifact(&format!("yieldshell-win32-x64-{version}"), ".tgz"),
            modules.join("@yieldshell/win32-x64"),
        ),
        (
            artifact(&format!("yieldshell-{version}"), ".tgz"),
            modules.join("yieldshell"),
        ),
    ] {
        std::fs::create_dir_all(&into).expect("mkdir");
        ok(Command::new("tar")
            .args(["-xzf"])
            .arg(&tgz)
            .args(["--strip-components=1", "-C"])
            .arg(&into));
    }
    let native = modules.join("@yieldshell/win32-x64");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(native.join("package.json")).expect("package.json"))
            .expect("json");
    assert_eq!(manifest["name"], "@yieldshell/win32-x64", "{manifest}");
    assert_eq!(manifest["version"], version, "{manifest}");
    assert_eq!(manifest["os"], serde_json::json!(["win32"]), "{manifest}");
    assert_eq!(manifest["cpu"], serde_json::json!(["x64"]), "{manifest}");
    assert_eq!(
        files_under(&native),
        [
            "LICENSE-APACHE",
            "LICENSE-MIT",
            "bin/mcp-yieldshell.exe",
            "bin/yieldctl.exe",
            "bin/yieldshelld.exe",
            "package.json",
        ]
    );
    assert_windows_binaries(&native.join("bin"), "@yieldshell/win32-x64");
    let zip = unzipped(&artifact(&windows_stem(), ".zip"));
    assert_same_executables(
        &native.join("bin"),
        &zip.path().join(windows_stem()).join("bin"),
        "@yieldshell/win32-x64",
    );

    let launcher: serde_json::Value = serde_json::from_slice(
        &std::fs::read(modules.join("yieldshell/package.json")).expect("package.json"),
    )
    .expect("json");
    assert_eq!(
        launcher["optionalDependencies"]["@yieldshell/win32-x64"], version,
        "{launcher}"
    );
    // The launcher's choice as node on Windows makes it (platform and arch are what node
    // reports there); for Linux, the same code picks the Linux package. Not run: node on Windows
    // spawning the .exe.
    let pick = |platform: &str, arch: &str| {
        let script = format!(
            "Object.defineProperty(process, 'platform', {{ value: '{platform}' }});\n\
             Object.defineProperty(process, 'arch', {{ value: '{arch}' }});\n\
             process.stdout.write(require('yieldshell/launch.js').binaryPath('mcp-yieldshell'));"
        );
        run(Command::new(&node)
            .args(["-e", &script])
            .current_dir(project.path())
            .stdin(Stdio::null()))
    };
    let out = pick("win32", "x64");
    assert_eq!(
        text(&out.stdout),
        native.join("bin/mcp-yieldshell.exe").display().to_string(),
        "{out:?}"
    );
    let out = pick("linux", "x64");
    assert!(
        !out.status.success() && text(&out.stderr).contains("@yieldshell/linux-x64"),
        "{out:?}"
    );
}

/// Stops the daemon a test's Windows client started (on `pipe`, with the release's
/// `yieldctl.exe`), also when the test fails before it does.
struct StopWindowsDaemon {
    yieldctl: PathBuf,
    pipe: String,
    stopped: bool,
}

impl StopWindowsDaemon {
    fn stop(&mut self) -> std::process::Output {
        self.stopped = true;
        windows_wine::wine()
            .command(&self.yieldctl)
            .args(["daemon", "stop"])
            .env("YIELDSHELL_SOCKET", &self.pipe)
            .env("YIELDSHELL_NO_AUTOSTART", "1")
            .finish()
    }
}

impl Drop for StopWindowsDaemon {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.stop();
        }
    }
}

/// The zip as a Windows user unpacks it: its `mcp-yieldshell.exe`, run by a real MCP client
/// under Wine, answers `tools/list` and an `exec`, with the daemon it started from beside
/// itself (`bin\yieldshelld.exe` of the zip, nothing pointing it there). The wheel's and npm's
/// executables are the same bytes (checked above). Not run: Windows itself (see windows_wine).
#[tokio::test]
#[ignore = "needs the release artifacts (target/dist) and wine: run .ci/test-extra dist"]
async fn the_unzipped_windows_release_serves_mcp_under_wine_with_its_own_daemon() {
    let zip = unzipped(&artifact(&windows_stem(), ".zip"));
    let bin_dir = zip.path().join(windows_stem()).join("bin");
    let wine = tokio::task::spawn_blocking(windows_wine::wine)
        .await
        .expect("wine prefix");
    let pipe = format!(r"\\.\pipe\yieldshell-test-{}", windows_wine::unique());
    let stopper = StopWindowsDaemon {
        yieldctl: bin_dir.join("yieldctl.exe"),
        pipe: pipe.clone(),
        stopped: false,
    };
    let mut cmd = tokio::process::Command::from(wine.command(bin_dir.join("mcp-yieldshell.exe")));
    cmd.env("YIELDSHELL_SOCKET", &pipe)
        .env(
            "YIELDSHELL_STATE_DIR",
            windows_wine::windows_path(&zip.path().join("state")),
        )
        .env_remove("YIELDSHELL_DAEMON_BIN")
        .env_remove("YIELDSHELL_NO_AUTOSTART")
        .kill_on_drop(true);
    let mcp = Mcp::start_command(cmd).await;
    let names = mcp.tool_names().await;
    assert!(names.iter().any(|n| n == "exec"), "tools/list: {names:?}");
    let r = mcp
        .call(
            "exec",
            json!({"command": "echo from-the-zip& exit 6", "side_effects": ["NONE"]}),
        )
        .await;
    let b = body(&r);
    assert_eq!(b["status"], "completed", "{b}");
    assert_eq!(b["exit_code"], 6, "{b}");
    assert_eq!(b["stdout"], "from-the-zip\r\n", "{b}");
    mcp.close().await;

    // The daemon is the zip's: Wine runs it as a Linux process named by its Windows path.
    let daemon = format!("{}\\yieldshelld.exe", windows_wine::windows_path(&bin_dir));
    let found = windows_wine::processes_with(std::slice::from_ref(&daemon));
    assert!(!found.is_empty(), "no daemon runs from {daemon}");
    let stopped = tokio::task::spawn_blocking(move || {
        let mut stopper = stopper;
        let out = stopper.stop();
        assert!(out.status.success(), "daemon stop: {out:?}");
        eventually_blocking("the zip's daemon to exit", || {
            windows_wine::processes_with(std::slice::from_ref(&daemon))
                .is_empty()
                .then_some(())
        });
    });
    stopped.await.expect("daemon stop");
}
