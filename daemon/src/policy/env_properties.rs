//! Property tests of the environment rule under `ALLOW_COMMANDS`: a variable that
//! [`risky_env`](super::risky_env) refuses is refused in every way a command can set it (the
//! overlay, an inline assignment, `export`, `declare -x`, `env`, `for`, `${…:=…}`, `read`,
//! `printf -v`), and a harmless one is accepted in all of them. Cases: `PROPTEST_CASES`
//! (default 64).

use proptest::prelude::*;

use super::risky_env::{FAMILIES, INERT, NAMES, WORDS};
use super::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Ways a command line sets `{n}` to `{v}` before running `ls`.
const LINE_FORMS: &[&str] = &[
    "{n}='{v}' ls",
    "{n}='{v}'; ls",
    "export {n}='{v}'; ls",
    "export \"{n}={v}\"; ls",
    "export '{n}'='{v}' && ls",
    "declare -x {n}='{v}'; ls",
    "env {n}='{v}' ls",
    "env '{n}={v}' ls",
    "env -i \"{n}={v}\" ls",
    "for {n} in '{v}'; do ls; done",
    ": \"${{n}:={v}}\"; ls",
    "read -r {n}; ls",
    "printf -v {n} '%s' '{v}'; ls",
];

/// The session policy: the programs of every form are allowed.
fn policy() -> Policy {
    let allowed = ["ls", "export", "declare", "env", ":", "read", "printf"];
    Policy::compile(
        &pb::SessionPolicy {
            allow_commands: allowed.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        &PolicyFloor::default(),
    )
    .expect("compile")
}

/// The issue's variables, the irregular names, members of the families and names with a
/// refused word, in upper or lower case.
fn risky_name() -> impl Strategy<Value = String> {
    // Names a shell line can assign (`BASH_FUNC_ls%%` arrives only through the environment;
    // in `${X:=v}` it would read as the `%%` operator, not an assignment).
    let issue = prop::sample::select(super::risky_env::KNOWN_RISKY)
        .prop_filter("a shell variable name", |n| {
            n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .prop_map(str::to_string);
    let irregular = prop::sample::select(NAMES).prop_map(str::to_string);
    let family = (prop::sample::select(FAMILIES), "[A-Z0-9]{0,8}")
        .prop_map(|(prefix, rest)| format!("{prefix}{rest}"))
        .prop_filter("inert", |name| !INERT.contains(&name.as_str()));
    let worded = ("[A-Z]{1,6}", prop::sample::select(WORDS), "(_[A-Z]{1,4})?")
        .prop_map(|(head, word, tail)| format!("{head}_{word}{tail}"));
    (prop_oneof![issue, irregular, family, worded], any::<bool>()).prop_map(|(name, lower)| {
        if lower {
            name.to_ascii_lowercase()
        } else {
            name
        }
    })
}

/// Variables that hold data only.
fn harmless_name() -> impl Strategy<Value = String> {
    let known = prop::sample::select(vec![
        "LANG",
        "LC_ALL",
        "TZ",
        "TERM",
        "NO_COLOR",
        "RUST_LOG",
        "MY_VAR",
        "MYPATH",
        "CI",
        "GIT_AUTHOR_NAME",
        "PYTHONUNBUFFERED",
        "NODE_ENV",
    ])
    .prop_map(str::to_string);
    // No irregular name, family or word starts with Q.
    prop_oneof![known, "Q[A-Z]{2,5}", "Q[A-Z]{1,4}_Q[A-Z]{1,3}"]
}

/// A value without quotes, `_` or letters but the first, so it never reads as a name.
fn value() -> impl Strategy<Value = String> {
    "v[0-9/.-]{0,11}"
}

fn line(form: &str, name: &str, value: &str) -> String {
    form.replace("{n}", name).replace("{v}", value)
}

fn overlay(name: &str, value: &str) -> [pb::EnvVar; 1] {
    [pb::EnvVar {
        name: name.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }]
}

/// A `command_denied` refusal that names `name`.
fn denied_naming(result: &Result<(), Refusal>, name: &str) -> bool {
    result
        .as_ref()
        .is_err_and(|r| r.kind == ErrorKind::CommandDenied && r.message.contains(name))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_risky_variables_are_refused_however_they_are_set(
        name in risky_name(),
        value in value(),
    ) {
        let p = policy();
        let r = p.check_overlay(&overlay(&name, &value));
        prop_assert!(denied_naming(&r, &name), "overlay {name}: {r:?}");
        for form in LINE_FORMS {
            let line = line(form, &name, &value);
            let r = p.check_command(line.as_bytes());
            prop_assert!(denied_naming(&r, &name), "{line:?}: {r:?}");
        }
    }

    #[test]
    fn prop_harmless_variables_are_accepted_however_they_are_set(
        name in harmless_name(),
        value in value(),
    ) {
        let p = policy();
        prop_assert_eq!(p.check_overlay(&overlay(&name, &value)), Ok(()), "overlay {}", name);
        for form in LINE_FORMS {
            let line = line(form, &name, &value);
            prop_assert_eq!(p.check_command(line.as_bytes()), Ok(()), "{:?}", line);
        }
    }
}
