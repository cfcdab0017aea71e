//! The daemon's one error: a machine-readable [`ErrorKind`] (the wire's `error_kind`) and a
//! message that names the rule or the fix. Policy refusals, stdin failures and session errors
//! are all this type, and one `From` turns it into the gRPC status clients decode.

use yieldshell_proto::errors::ErrorKind;

/// Why a request could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// Machine-readable kind.
    pub kind: ErrorKind,
    /// Message for the agent or person: what was refused, and what to do instead.
    pub message: String,
}

impl Error {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> tonic::Status {
        e.kind.status(e.message)
    }
}
