//! Environment variables that change which program runs or what a program loads.
//!
//! `ALLOW_COMMANDS` grants programs by name. A variable such as `PATH` decides which file that
//! name means, and `LD_PRELOAD` or `NODE_OPTIONS` make an allowed program load and run code the
//! user never granted, so with `ALLOW_COMMANDS` set a command may not set any of them: not in the
//! request's `env` overlay, not by an assignment in the line (`PATH=/x ls`, `for PATH in …`,
//! `${PATH:=…}`), and not through a builtin that assigns (`export "PATH=/x"`, `env 'PATH=/x' ls`,
//! `read PATH`). [`why_risky`] is the one rule all of those paths ask.
//!
//! The session's own environment is not checked: the client that sends it sends the session's
//! policy in the same request (and could leave `ALLOW_COMMANDS` out), and it holds the user's real
//! `PATH`.
//!
//! # The rule
//! Names are compared in ASCII upper case (npm reads `npm_config_*`, curl `http_proxy`: some
//! programs read lower-case names). A name is risky when
//! 1. it is one of a few shell and C-library variables with irregular names ([`NAMES`]): `IFS`,
//!    `ENV`, `BASH_ENV`, `PS4`, `GLIBC_TUNABLES`, compiler choices like `CC`, …;
//! 2. it starts with the prefix of a family whose members mostly load or run code
//!    ([`FAMILIES`]): the dynamic loaders (`LD_*`, `DYLD_*`), bash's exported functions
//!    (`BASH_FUNC_*`), git (`GIT_EXEC_PATH`, `GIT_SSH_COMMAND`, `GIT_DIR` with its hooks, …) and
//!    the interpreters and build tools (`PYTHON*`, `PERL*`, `RUBY*`, `NODE_*`, `CARGO_*`, …),
//!    unless it is one of the few known-inert members in [`INERT`] (`GIT_AUTHOR_NAME`,
//!    `PYTHONUNBUFFERED`, `NODE_ENV`, …);
//! 3. one of its `_`-separated words names what such variables hold ([`WORDS`]): a search path
//!    (`PATH`: `LD_LIBRARY_PATH`, `GCONV_PATH`, `NODE_PATH`), options or flags that programs parse
//!    as their own command line (`OPTIONS`, `FLAGS`: `JAVA_TOOL_OPTIONS` with `-javaagent`,
//!    `TAR_OPTIONS` with `--to-command`), a program to run (`EDITOR`, `PAGER`, `ASKPASS`,
//!    `COMMAND`, `WRAPPER`, `RUNNER`, `SHELL`), or a file or directory read at start-up whose
//!    contents can name programs (`HOME`, `CONFIG`, `RC`, `INIT`, `STARTUP`, `HOOKS`,
//!    `PLUGINS`);
//! 4. or it is a fused spelling of those words that a known program reads ([`NAMES`] again):
//!    `CLASSPATH`, `NLSPATH`, `CDPATH`, `SHELLOPTS`, `RUSTFLAGS`, `MAKEFLAGS`, `KUBECONFIG`, ….
//!
//! The rule errs towards refusing: a refusal names the variable, and the user can set it in the
//! session's environment (the shim's own) instead. Words are matched whole, so `MYPATH` or
//! `RUST_LOG` stay allowed.
//!
//! # Known gaps
//! Variables that only point a program at data rather than code (`TZ`, `LANG`, `TMPDIR`,
//! `http_proxy`, `SSL_CERT_FILE`), and package-index variables (`PIP_INDEX_URL`) that make an
//! allowed installer download code, are not refused.

/// Irregular names, each read by the shell, the C library or a common tool as code, a program
/// or a search path.
pub const NAMES: &[&str] = &[
    // The shell that runs the line and the shells an allowed program may start.
    "ENV",        // dash and POSIX-mode bash source it when interactive (`sh -i`)
    "BASH_ENV",   // every non-interactive bash sources it
    "IFS",        // changes how unquoted words split, the oldest trick against system()
    "PS0",        // bash runs substitutions in prompts
    "PS1",        // …
    "PS2",        // …
    "PS3",        // …
    "PS4",        // …expanded (with substitutions) before every traced command under `set -x`
    "SHELLOPTS",  // bash imports `xtrace` (with PS4) and other options from it
    "BASHOPTS",   // …and shopt options
    "EXECIGNORE", // bash: which PATH entries command lookup skips
    "CDPATH",     // where `cd dir` goes, and so which `./prog` runs after it
    "FPATH",      // ksh and zsh autoload functions from it
    "ZDOTDIR",    // zsh reads its start-up files there
    "INPUTRC",    // readline key bindings and macros of interactive programs
    // The C library.
    "GLIBC_TUNABLES", // parsed by the loader before main (CVE-2023-4911)
    "NLSPATH",        // message catalogs opened by catopen
    "LOCPATH",        // locale data parsed by setlocale
    "MALLOC_CONF",    // jemalloc options, including a profile dump path
    // Tools that take another program from a variable.
    "CC",
    "CXX",
    "CPP",
    "LD",
    "AS",
    "AR",
    "MAKE",
    "MAKEFILES", // make reads these makefiles (and runs their recipes) first
    "CFLAGS",    // `-B dir` makes gcc run `as` and `ld` from dir, `-fplugin=` loads a .so
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "MAKEFLAGS", // may hold variable definitions such as SHELL=
    "MFLAGS",
    "GNUMAKEFLAGS",
    "RUSTFLAGS", // `-C linker=prog`
    "GOFLAGS",   // `-toolexec=prog`
    "GOROOT",
    "GOTOOLCHAIN", // makes `go` download and run another toolchain
    "GOENV",
    "CLASSPATH",
    "EMACSLOADPATH",
    "TCLLIBPATH",
    "LESSOPEN", // less runs it as an input preprocessor
    "LESSCLOSE",
    "MANPAGER",
    "VISUAL",
    "BROWSER",
    "EXINIT", // vi runs these ex commands, `:!prog` included
    "VIMINIT",
    "MYVIMRC",
    "WGETRC",
    "GNUPGHOME",
    "KUBECONFIG", // exec credential plugins
    "ZIPOPT",     // zip's `-TT cmd`
];

/// Prefixes of families whose members mostly make a program load or run other code.
pub const FAMILIES: &[&str] = &[
    "LD_",         // glibc and musl loaders: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, …
    "DYLD_",       // the macOS loader: DYLD_INSERT_LIBRARIES, …
    "BASH_FUNC_",  // bash imports functions from these, overriding any command name
    "GIT_",        // GIT_EXEC_PATH, GIT_SSH(_COMMAND), GIT_PAGER, GIT_DIR (hooks), GIT_CONFIG_*
    "PYTHON",      // PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONWARNINGS imports a module
    "PERL",        // PERL5LIB, PERL5OPT (`-M` loads a module), PERLLIB
    "RUBY",        // RUBYLIB, RUBYOPT
    "GEM_",        // rubygems loads plugins from GEM_PATH
    "BUNDLE_",     // BUNDLE_GEMFILE is Ruby code
    "NODE_",       // NODE_OPTIONS (`--require`), NODE_PATH
    "NPM_CONFIG_", // npm_config_script_shell, npm_config_node_options, …
    "LUA_",        // LUA_INIT runs code, LUA_PATH, LUA_CPATH
    "PHP",         // PHPRC, PHP_INI_SCAN_DIR (auto_prepend_file)
    "JAVA",        // JAVA_TOOL_OPTIONS (`-javaagent`), JAVA_HOME (which java runs)
    "_JAVA_",      // _JAVA_OPTIONS
    "JDK_JAVA_",   // JDK_JAVA_OPTIONS
    "CARGO_",      // CARGO_BUILD_RUSTC_WRAPPER, CARGO_TARGET_*_RUNNER, CARGO_HOME
    "RUSTC",       // RUSTC, RUSTC_WRAPPER
    "RUSTDOC",     // RUSTDOC, RUSTDOCFLAGS
    "DOTNET_",     // DOTNET_STARTUP_HOOKS
    "CORECLR_",    // CORECLR_PROFILER_PATH
    "OPENSSL_",    // OPENSSL_CONF loads engines and providers (.so)
];

/// Members of [`FAMILIES`] (or names containing a [`WORDS`] word) that hold only data.
pub const INERT: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "GIT_TERMINAL_PROMPT",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "NODE_ENV",
    "CARGO_TERM_COLOR",
    "CARGO_INCREMENTAL",
];

/// `_`-separated words that name a search path, a program, options a program parses, or a file
/// or directory read at start-up.
pub const WORDS: &[&str] = &[
    "PATH",
    "LIB",
    "LIBS",
    "PRELOAD",
    "AUDIT",
    "OPT",
    "OPTS",
    "OPTIONS",
    "FLAGS",
    "EXEC",
    "EXECUTABLE",
    "COMMAND",
    "CMD",
    "PROGRAM",
    "SHELL",
    "EDITOR",
    "PAGER",
    "ASKPASS",
    "WRAPPER",
    "RUNNER",
    "HOME",
    "CONFIG",
    "CONF",
    "RC",
    "INIT",
    "STARTUP",
    "HOOK",
    "HOOKS",
    "PLUGIN",
    "PLUGINS",
    "MODULES",
    "ENGINES",
    "TUNABLES",
];

/// Why setting `name` may change which program runs or what it loads, or `None` if it does not
/// (as far as this rule knows; see the module documentation).
pub fn why_risky(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    let upper = upper.as_str();
    if INERT.contains(&upper) {
        return None;
    }
    if NAMES.contains(&upper) {
        return Some("the shell, the C library or a common tool reads it as code or a program");
    }
    if FAMILIES.iter().any(|prefix| upper.starts_with(prefix)) {
        return Some("its family of variables makes programs load or run other code");
    }
    if upper.split('_').any(|word| WORDS.contains(&word)) {
        return Some("it names a search path, a program, program options or a start-up file");
    }
    None
}

/// Variables named by issue 16 and its exploits, and their close relatives: each must be
/// risky. Shared by the unit tests and the property tests.
#[cfg(test)]
pub(crate) const KNOWN_RISKY: &[&str] = &[
    "PATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "LD_BIND_NOW",
    "DYLD_INSERT_LIBRARIES",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "PS4",
    "PROMPT_COMMAND",
    "GCONV_PATH",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYOPT",
    "NODE_OPTIONS",
    "GIT_EXEC_PATH",
    "GIT_SSH_COMMAND",
    "GIT_DIR",
    "BASH_FUNC_ls%%",
    "JAVA_TOOL_OPTIONS",
    "EDITOR",
    "GIT_PAGER",
    "SSH_ASKPASS",
    "RUSTC_WRAPPER",
    "XDG_CONFIG_HOME",
    "HOME",
    "CLASSPATH",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_of_the_issue_are_risky() {
        for name in KNOWN_RISKY {
            assert!(why_risky(name).is_some(), "{name} should be risky");
        }
    }

    #[test]
    fn names_are_compared_without_case() {
        assert!(why_risky("npm_config_script_shell").is_some());
        assert!(why_risky("path").is_some());
        assert!(why_risky("Ld_Preload").is_some());
        assert_eq!(why_risky("git_author_name"), None);
    }

    #[test]
    fn data_variables_are_not_risky() {
        for name in [
            "LANG",
            "LC_ALL",
            "TZ",
            "TERM",
            "NO_COLOR",
            "RUST_LOG",
            "RUST_BACKTRACE",
            "MYPATH",
            "DEBUG",
            "CI",
            "GIT_AUTHOR_NAME",
            "PYTHONUNBUFFERED",
            "NODE_ENV",
            "TMPDIR",
            "USER",
        ] {
            assert_eq!(why_risky(name), None, "{name} should be allowed");
        }
    }

    #[test]
    fn words_match_whole_not_inside_other_words() {
        assert!(why_risky("MY_TOOL_PATH").is_some());
        assert!(why_risky("FOO_OPTIONS").is_some());
        assert_eq!(why_risky("XPATHY"), None);
        assert_eq!(why_risky("HOMER"), None);
    }
}
