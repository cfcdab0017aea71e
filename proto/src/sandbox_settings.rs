//! The sandbox's two settings as clients and the daemon spell them (README, "Sandbox"):
//! `YIELDSHELL_SANDBOX` ([`SandboxMode`]) and `YIELDSHELL_SANDBOX_NETWORK` ([`NetworkSetting`]).
//!
//! Parsed here once, so a client refuses a bad value at startup naming the valid ones, and the
//! daemon (which re-checks what it receives, and reads the same words from its config file's
//! floor) never disagrees with it.

/// Sets the session's sandbox mode.
pub const ENV_SANDBOX: &str = "YIELDSHELL_SANDBOX";
/// Sets the session's network setting.
pub const ENV_SANDBOX_NETWORK: &str = "YIELDSHELL_SANDBOX_NETWORK";

/// What a session's commands may touch (`YIELDSHELL_SANDBOX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// No sandbox (the default: the seed's behaviour, declarations checked against the block
    /// list only).
    #[default]
    Off,
    /// Each command gets what its `side_effects` declare.
    Declared,
    /// Writes only under the workspace (and the private temp dir).
    WorkspaceWrite,
    /// Writes only in the private temp dir.
    ReadOnly,
}

impl SandboxMode {
    /// Every mode, in the order the docs list them.
    pub const ALL: [SandboxMode; 4] = [
        SandboxMode::Off,
        SandboxMode::Declared,
        SandboxMode::WorkspaceWrite,
        SandboxMode::ReadOnly,
    ];

    /// The word for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::Declared => "declared",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
        }
    }

    /// Parses a mode (surrounding spaces and case ignored; empty is `off`).
    pub fn parse(value: &str) -> Result<SandboxMode, String> {
        let v = value.trim().to_ascii_lowercase();
        if v.is_empty() {
            return Ok(SandboxMode::Off);
        }
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.as_str() == v)
            .ok_or_else(|| {
                format!(
                    "unknown sandbox mode; valid values: {}",
                    SandboxMode::ALL.map(SandboxMode::as_str).join(", ")
                )
            })
    }
}

/// What a session's commands may reach over the network (`YIELDSHELL_SANDBOX_NETWORK`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NetworkSetting {
    /// On only for a command that declares a network side effect (the default).
    #[default]
    Declared,
    /// Never.
    Off,
    /// Always.
    On,
    /// HTTP(S) through the daemon's proxy, to these hosts only (for a command that declares a
    /// network side effect).
    Allow(Vec<HostPattern>),
}

impl NetworkSetting {
    /// Parses a setting: `declared`, `off`, `on`, or `allow:HOST,*.HOST2,…` (empty is
    /// `declared`).
    pub fn parse(value: &str) -> Result<NetworkSetting, String> {
        let v = value.trim();
        let lower = v.to_ascii_lowercase();
        match lower.as_str() {
            "" | "declared" => return Ok(NetworkSetting::Declared),
            "off" => return Ok(NetworkSetting::Off),
            "on" => return Ok(NetworkSetting::On),
            _ => {}
        }
        let Some(list) = lower.strip_prefix("allow:") else {
            return Err(
                "unknown network setting; valid values: declared, off, on, allow:HOST,*.HOST2,…"
                    .to_string(),
            );
        };
        let hosts = list
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(HostPattern::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if hosts.is_empty() {
            return Err("allow: names no host (use off for none)".to_string());
        }
        Ok(NetworkSetting::Allow(hosts))
    }

    /// The setting as written (`allow:` lists its hosts).
    pub fn to_text(&self) -> String {
        match self {
            NetworkSetting::Declared => "declared".to_string(),
            NetworkSetting::Off => "off".to_string(),
            NetworkSetting::On => "on".to_string(),
            NetworkSetting::Allow(hosts) => format!(
                "allow:{}",
                hosts
                    .iter()
                    .map(HostPattern::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// One entry of an allowlist: a host name (`example.com`, matched exactly) or a wildcard
/// (`*.example.com`, any name below it but not `example.com` itself). Lowercase; IP literals
/// are names like any other (`127.0.0.1` allows exactly that address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern(String);

impl HostPattern {
    /// Parses one entry: letters, digits, `-`, `.`, `:` (IPv6 literals, without brackets) and
    /// `_`, optionally after `*.`; no ports, schemes or paths.
    pub fn parse(entry: &str) -> Result<HostPattern, String> {
        let e = entry.trim().trim_end_matches('.').to_ascii_lowercase();
        let name = e.strip_prefix("*.").unwrap_or(&e);
        let valid = !name.is_empty()
            && name.len() <= 253
            && !name.starts_with('.')
            && !name.contains("..")
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
        // A colon only in an IPv6 literal: `host:443` names a port, which entries have none.
        let valid = valid && (!name.contains(':') || name.parse::<std::net::Ipv6Addr>().is_ok());
        if !valid || name.contains('*') {
            return Err(format!(
                "{entry:?} is not a host name or *.domain (no scheme, port or path)"
            ));
        }
        Ok(HostPattern(e))
    }

    /// The entry as written (lowercase).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `host` (a name or an IP literal, any case, no port) is allowed by this entry.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match self.0.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
            None => host == self.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_case_blind_and_bad_ones_list_the_valid() {
        assert_eq!(SandboxMode::parse(" Declared "), Ok(SandboxMode::Declared));
        assert_eq!(SandboxMode::parse(""), Ok(SandboxMode::Off));
        assert_eq!(SandboxMode::parse("read-only"), Ok(SandboxMode::ReadOnly));
        let e = SandboxMode::parse("strict").expect_err("accepted");
        assert!(
            e.contains("off, declared, workspace-write, read-only"),
            "{e}"
        );
    }

    #[test]
    fn network_settings_parse_with_their_allowlist() {
        assert_eq!(NetworkSetting::parse(""), Ok(NetworkSetting::Declared));
        assert_eq!(NetworkSetting::parse("OFF"), Ok(NetworkSetting::Off));
        let allow = NetworkSetting::parse("allow: PyPI.org , *.github.com,").expect("allow");
        assert_eq!(allow.to_text(), "allow:pypi.org,*.github.com");
        assert!(NetworkSetting::parse("allow:").is_err());
        assert!(NetworkSetting::parse("allow:https://x.org").is_err());
        assert!(NetworkSetting::parse("allow:x.org:443").is_err());
        assert!(NetworkSetting::parse("allow:*").is_err());
        assert!(NetworkSetting::parse("allow:a.*.org").is_err());
        assert!(NetworkSetting::parse("sometimes").is_err());
    }

    #[test]
    fn a_wildcard_allows_names_below_its_domain_only() {
        let exact = HostPattern::parse("pypi.org").expect("host");
        assert!(exact.allows("PyPI.org") && exact.allows("pypi.org."));
        assert!(!exact.allows("files.pypi.org") && !exact.allows("evilpypi.org"));
        let wild = HostPattern::parse("*.github.com").expect("wildcard");
        assert!(wild.allows("api.github.com") && wild.allows("a.b.github.com"));
        assert!(!wild.allows("github.com") && !wild.allows("evilgithub.com"));
        assert!(!wild.allows(".github.com"));
        let v6 = HostPattern::parse("::1").expect("v6");
        assert!(v6.allows("[::1]"));
    }
}
