//! The forms a process id can take.
//!
//! The daemon names a process `proc_` + 12 hex digits unless the client chooses the id itself
//! (`ExecRequest.process_id`). Client-chosen ids have exactly one accepted form, a lowercase
//! hyphenated UUID — what the `jobs` profile of `mcp-yieldshell` uses as its job ids — so the
//! daemon and its clients agree on what is valid without a round trip.

/// Whether `id` is an acceptable client-chosen process id: a lowercase hyphenated UUID
/// (`8-4-4-4-12` hex digits, any version).
///
/// The form is narrow on purpose: ids name directories in the daemon's state dir, so nothing like
/// `..` or `/` may pass, and a UUID can never collide with a daemon-chosen `proc_` id.
pub fn is_client_process_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_process_ids_are_lowercase_uuids_only() {
        assert!(is_client_process_id("0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b"));
        assert!(is_client_process_id(&uuid::Uuid::new_v4().to_string()));
        for bad in [
            "",
            "proc_1a2b3c4d5e6f",
            "0F8E2C1A-5B7D-4E3F-9A1B-2C3D4E5F6A7B",
            "0f8e2c1a5b7d4e3f9a1b2c3d4e5f6a7b",
            "0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7",
            "0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7bc",
            "../../../../etc/passwd-aaaaaaaaaaaaa",
            "0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7g",
            "0f8e2c1a+5b7d-4e3f-9a1b-2c3d4e5f6a7b",
        ] {
            assert!(!is_client_process_id(bad), "{bad}");
        }
    }
}
