//! Requests, GPU time and incidents as files other tools open: a request's token table and a
//! window's GPU time as CSV (spreadsheets, pandas) and its timeline as Chrome trace JSON (Perfetto UI, chrome://tracing);
//! an incident as Markdown for a ticket and as its link preview (PNG, SVG). Pure: API values in,
//! bytes out.

mod chrome_trace;
mod csv;
pub mod markdown;
pub mod preview;
mod usage;

pub use chrome_trace::chrome_trace;
pub use csv::tokens_csv;
pub use usage::usage_csv;

/// A file name made of the request id: its letters, digits, `.`, `-` and `_`, the rest as `_`
/// (the id is the client's text and ends up in a `Content-Disposition` header).
pub fn file_stem(request_id: &str) -> String {
    let stem: String = request_id
        .chars()
        .take(80)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() {
        "request".into()
    } else {
        stem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_keep_only_safe_characters() {
        assert_eq!(file_stem("chatcmpl-9x_1.2"), "chatcmpl-9x_1.2");
        assert_eq!(file_stem("a\"b\r\nc/d"), "a_b__c_d");
        assert_eq!(file_stem(""), "request");
    }
}
