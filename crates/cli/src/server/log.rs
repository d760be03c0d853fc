//! The log of `raidkit serve`: one line per thing that happened, with a timestamp, as text for
//! people or as one JSON object per line for log collectors (`--log-format json`).
//!
//! Owns the line format. Every line has the time (RFC 3339, UTC, milliseconds), a level, an
//! event name (the kebab-case names of [`raidkit_engine::ArrayEvent`] for arrays, `connection-*`
//! for clients, `server-*` for the server itself), the array it concerns if any, and a sentence;
//! JSON lines carry the event's fields too. Strings a client chose (export names) are escaped
//! before they reach a line, so a client cannot forge log lines or terminal escapes.
//!
//! Lines go to stderr, each written whole under a lock, so lines from the connection threads,
//! the array watchers and the main thread never interleave.

use std::io::Write;
use std::sync::Mutex;
use std::time::SystemTime;

/// How lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-11-26T12:00:00.123Z raidkit: md0: m2.img: marked faulty (…)`.
    #[default]
    Text,
    /// `{"time":"…","level":"warning","event":"member-faulty","array":"md0",…,"message":"…"}`.
    Json,
}

/// How much a line matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warning,
    Error,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// The server's log.
#[derive(Debug, Default)]
pub struct ServerLog {
    format: LogFormat,
    out: Mutex<()>,
}

impl ServerLog {
    pub fn new(format: LogFormat) -> ServerLog {
        ServerLog {
            format,
            out: Mutex::new(()),
        }
    }

    /// Writes one line: `event` names it, `array` is the export it concerns, `message` is the
    /// sentence, and `fields` (a JSON object, or null) what JSON lines carry besides.
    pub fn line(
        &self,
        level: Level,
        event: &str,
        array: Option<&str>,
        message: &str,
        fields: serde_json::Value,
    ) {
        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let text = match self.format {
            LogFormat::Text => {
                let mut t = format!("{time} raidkit: ");
                if level != Level::Info {
                    t.push_str(level.name());
                    t.push_str(": ");
                }
                if let Some(a) = array {
                    t.push_str(&raidkit_nbd::escape_for_log(a));
                    t.push_str(": ");
                }
                t.push_str(message);
                t
            }
            LogFormat::Json => {
                let mut obj = serde_json::Map::new();
                obj.insert("time".into(), time.into());
                obj.insert("level".into(), level.name().into());
                obj.insert("event".into(), event.into());
                if let Some(a) = array {
                    obj.insert("array".into(), a.into());
                }
                if let serde_json::Value::Object(more) = fields {
                    for (k, v) in more {
                        // The event's own tag is `event` already.
                        if k != "event" {
                            obj.entry(k).or_insert(v);
                        }
                    }
                }
                obj.insert("message".into(), message.into());
                serde_json::Value::Object(obj).to_string()
            }
        };
        let _g = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{text}");
    }

    pub fn info(&self, event: &str, array: Option<&str>, message: &str) {
        self.line(Level::Info, event, array, message, serde_json::Value::Null);
    }

    pub fn warning(&self, event: &str, array: Option<&str>, message: &str) {
        self.line(
            Level::Warning,
            event,
            array,
            message,
            serde_json::Value::Null,
        );
    }

    /// An array's event, with its fields, at the level it deserves.
    pub fn array_event(&self, array: &str, event: &raidkit_engine::ArrayEvent) {
        use raidkit_engine::ArrayEvent as E;
        let level = match event {
            E::ArrayFailed { .. } => Level::Error,
            E::MemberFaulty { .. }
            | E::ArrayDegraded { .. }
            | E::NoSpace { .. }
            | E::ReadError { .. }
            | E::BadBlocksRecorded { .. }
            | E::DriveHealthWarning { .. }
            | E::RunningDegraded { .. }
            | E::DirtyDegradedStarted { .. }
            | E::StaleTakenBack { .. }
            | E::JournalMissing
            | E::BitmapOutOfDate { .. }
            | E::PplNotReplayed
            | E::PplUnreadable { .. }
            | E::PplNoValidHeader { .. }
            | E::PplEntryRefused { .. }
            | E::PplRowsLost { .. }
            | E::PplReplayReadFailed { .. }
            | E::PplReplayWriteFailed { .. }
            | E::PplResetFailed { .. }
            | E::ResyncSkipped { .. }
            | E::RebuildUnreadable { .. } => Level::Warning,
            E::TaskFinished {
                completed: false, ..
            } => Level::Warning,
            _ => Level::Info,
        };
        let fields = serde_json::to_value(event).unwrap_or(serde_json::Value::Null);
        let name = fields["event"]
            .as_str()
            .unwrap_or("array-event")
            .to_string();
        self.line(level, &name, Some(array), &event.to_string(), fields);
    }

    /// What the NBD server reports about its clients.
    pub fn server_event(&self, event: &raidkit_nbd::ServerEvent<'_>) {
        use raidkit_nbd::{ConnectionEnd, ServerEvent as S};
        use serde_json::json;
        match event {
            S::Accepted { connection, peer } => self.line(
                Level::Info,
                "connection-accepted",
                None,
                &format!("connection {connection} from {peer}"),
                json!({ "connection": connection, "peer": peer.to_string() }),
            ),
            S::Refused {
                connection,
                peer,
                reason,
            } => self.line(
                Level::Warning,
                "connection-refused",
                None,
                &match connection {
                    Some(c) => format!("connection {c} from {peer} refused: {reason}"),
                    None => format!("connection from {peer} refused: {reason}"),
                },
                json!({ "connection": connection, "peer": peer.to_string(), "reason": reason.to_string() }),
            ),
            S::Negotiated {
                connection,
                export,
                structured_replies,
                tls,
            } => self.line(
                Level::Info,
                "connection-negotiated",
                Some(export),
                &format!(
                    "connection {connection} uses the export{}",
                    if *tls { " over TLS" } else { "" }
                ),
                json!({ "connection": connection, "tls": tls, "structured_replies": structured_replies }),
            ),
            S::Throttled {
                connection,
                inflight_bytes_limit,
            } => self.line(
                Level::Warning,
                "connection-throttled",
                None,
                &format!(
                    "connection {connection} reached its limit of {inflight_bytes_limit} bytes in flight; its requests wait for replies to be read"
                ),
                json!({ "connection": connection, "inflight_bytes_limit": inflight_bytes_limit }),
            ),
            S::Closed { connection, end } => {
                let level = match end {
                    ConnectionEnd::Closed | ConnectionEnd::Aborted => Level::Info,
                    _ => Level::Warning,
                };
                self.line(
                    level,
                    "connection-closed",
                    None,
                    &format!("connection {connection} {end}"),
                    json!({ "connection": connection, "end": end.to_string() }),
                )
            }
        }
    }
}
