//! The binary's error: a message with context and one of the documented exit codes.

use std::fmt;

/// Documented exit codes (see `raidkit --help`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitCode {
    Failure = 1,
    Usage = 2,
    Refused = 3,
    Unavailable = 4,
    Mismatch = 5,
    Interrupted = 6,
}

#[derive(Debug)]
pub struct CliError {
    pub code: ExitCode,
    pub message: String,
}

impl CliError {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ExitCode::Usage, message)
    }
    pub fn failure(message: impl Into<String>) -> Self {
        Self::new(ExitCode::Failure, message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        CliError::failure(err.to_string())
    }
}
