//! The release artifacts that `packaging/release.sh` writes to `target/dist/`, installed as a
//! user installs them: the tarball (contents, checksums, unpacked and run), the wheel in a clean
//! venv, the npm packages with `npm install` in an empty directory; each installed
//! `mcp-yieldshell` is driven by a real MCP client (`tools/list`, an `exec`) and must start the
//! daemon its package put beside it. And no binary needs a glibc newer than 2.28.
//!
//! They need the artifacts, which take minutes to build, so they are `#[ignore]`d in the normal
//! suite: `.ci/run` runs `release.sh` (the quick `dist-check` profile) and then these, with
//! `cargo test -p yieldshell-tests --test e2e -- --ignored packaging_dist::`.
//! `YIELDSHELL_DIST_DIR` points them at another directory of artifacts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::helper::{TestDaemon, bin, installed_shim_command, require_tool, run, serve_one_exec};

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
#[ignore = "needs target/dist from packaging/release.sh; .ci/run builds it and runs these"]
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
#[ignore = "needs target/dist from packaging/release.sh; .ci/run builds it and runs these"]
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
#[ignore = "needs target/dist from packaging/release.sh; .ci/run builds it and runs these"]
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
#[ignore = "needs target/dist from packaging/release.sh; .ci/run builds it and runs these"]
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
#[ignore = "needs target/dist from packaging/release.sh; .ci/run builds it and runs these"]
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
#[ignore = "needs target/dist from packaging/release.sh; .ci/run builds it and runs these"]
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
