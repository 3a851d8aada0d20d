//! Errors of `netpolicy-core`. They are data: `Clone` and `PartialEq`, so tests compare
//! them, and every validation problem carries the field path of the bad input.

use std::fmt;

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One problem with one field of the input.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldError {
    /// Path of the field, as a user reads it: `spec.routes[2].via`.
    pub path: String,
    /// What is wrong, in a sentence a person understands.
    pub message: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Everything that can go wrong in `netpolicy-core`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input is invalid; every problem found is listed, in field order.
    #[error("{}", join(.0))]
    Invalid(Vec<FieldError>),
}

impl Error {
    /// The field problems, for [`Error::Invalid`].
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            Self::Invalid(v) => v,
        }
    }
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
