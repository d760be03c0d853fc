//! Making client-supplied text safe to put in a log line or an error message.
//!
//! Export names, option data and anything else a client sends are untrusted: a name holding
//! a newline could forge a second log line, an ANSI escape could rewrite a terminal, a
//! right-to-left override could make `disk` read as something else, and a 4096-byte name
//! would flood a log. [`escape_for_log`] is the one place that turns such text into a
//! bounded, printable, unambiguous form; every message this crate formats from client input
//! goes through it.
//!
//! Invariants: the result contains no control character, no Unicode format or separator
//! character that changes how text is displayed, no unescaped quote or backslash (so it can
//! be wrapped in quotes and read back without ambiguity), and at most
//! [`MAX_LOGGED_CHARS`] characters of the input (the cut is marked with how many bytes were
//! left off).

use std::fmt::Write;

/// Characters of input kept by [`escape_for_log`]; the rest is replaced by a marker.
pub const MAX_LOGGED_CHARS: usize = 128;

/// Escapes `s` for a log line or message: quotes and backslashes get a backslash, control
/// and display-changing characters become `\n`, `\t`, `\r` or `\u{..}`, and input past
/// [`MAX_LOGGED_CHARS`] characters is cut and marked `…(+N bytes)`. The result is meant to be
/// shown between double quotes.
pub fn escape_for_log(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_LOGGED_CHARS) + 2);
    for (kept, (at, c)) in s.char_indices().enumerate() {
        if kept == MAX_LOGGED_CHARS {
            let _ = write!(out, "…(+{} bytes)", s.len() - at);
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Control characters, whitespace other than the plain space, and the Unicode format
/// characters that change how surrounding text is displayed (bidirectional overrides and
/// isolates, zero-width characters, the byte order mark, interlinear annotation marks).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(
            c,
            '\u{ad}'
                | '\u{34f}'
                | '\u{61c}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{17b4}'
                | '\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_unchanged() {
        assert_eq!(escape_for_log("md0"), "md0");
        assert_eq!(escape_for_log("array one/ü"), "array one/ü");
        assert_eq!(escape_for_log(""), "");
    }

    #[test]
    fn quotes_controls_and_display_tricks_are_escaped() {
        assert_eq!(
            escape_for_log("a\"b'c\\d"),
            "a\\\"b\\'c\\\\d",
            "quotes and backslashes"
        );
        assert_eq!(
            escape_for_log("x\nINFO forged line\r\t"),
            "x\\nINFO forged line\\r\\t"
        );
        assert_eq!(escape_for_log("\u{1b}[2J\0"), "\\u{1b}[2J\\u{0}");
        assert_eq!(escape_for_log("\u{7f}\u{85}"), "\\u{7f}\\u{85}");
        // Right-to-left override, zero-width space, BOM, line separator, no-break space.
        assert_eq!(
            escape_for_log("\u{202e}kcol\u{200b}\u{feff}\u{2028}\u{a0}"),
            "\\u{202e}kcol\\u{200b}\\u{feff}\\u{2028}\\u{a0}"
        );
        let escaped = escape_for_log(&(0u8..=0x7f).map(char::from).collect::<String>());
        assert!(
            escaped.chars().all(|c| !c.is_control()),
            "no control character survives: {escaped}"
        );
    }

    #[test]
    fn long_input_is_cut_and_marked() {
        let long = "é".repeat(4096 / 2);
        let escaped = escape_for_log(&long);
        assert!(escaped.starts_with(&"é".repeat(MAX_LOGGED_CHARS)));
        assert!(
            escaped.ends_with(&format!("…(+{} bytes)", 4096 - 2 * MAX_LOGGED_CHARS)),
            "{escaped}"
        );
        assert!(escaped.chars().count() < MAX_LOGGED_CHARS + 20);
        // Exactly at the limit: nothing is cut.
        let edge = "a".repeat(MAX_LOGGED_CHARS);
        assert_eq!(escape_for_log(&edge), edge);
    }
}
