//! The token table as CSV (RFC 4180): one row per output token, the columns of the request
//! page's token view.

use std::fmt::Write;

use tokenscope_core::api::{RequestDetail, TokenView};

const HEADER: &str = "index,token_id,text,special,emitted_ns,latency_ms,wait_ms,compute_ms,\
iteration,batch_size,waiting,logprob,probability,rank,entropy,margin,flags,prefilled_meanwhile";

/// One cell: quoted when it holds a separator, quote or line break. Text a spreadsheet would run
/// as a formula (`=`, `+`, `-`, `@` followed by more) gets a leading `'`, so that model output
/// opened in Excel stays text (OWASP's advice for CSV injection).
pub(super) fn cell(out: &mut String, s: &str) {
    let formula = s.len() > 1 && s.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let quote = formula || s.contains([',', '"', '\n', '\r']);
    if quote {
        out.push('"');
    }
    if formula {
        out.push('\'');
    }
    for c in s.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    if quote {
        out.push('"');
    }
}

fn opt<T: std::fmt::Display>(out: &mut String, v: Option<T>) {
    if let Some(v) = v {
        let _ = write!(out, "{v}");
    }
}

fn row(out: &mut String, t: &TokenView) {
    let _ = write!(out, "{},", t.index);
    opt(out, t.token_id);
    out.push(',');
    cell(out, t.text.as_deref().unwrap_or(""));
    let _ = write!(out, ",{},", t.special.as_str());
    opt(out, t.emitted_ns);
    for v in [t.latency_ms, t.wait_ms, t.compute_ms] {
        out.push(',');
        opt(out, v.map(|v| (v * 1000.0).round() / 1000.0));
    }
    out.push(',');
    opt(out, t.iteration);
    out.push(',');
    opt(out, t.batch_size);
    out.push(',');
    opt(out, t.waiting);
    for v in [t.logprob, t.probability] {
        out.push(',');
        opt(out, v);
    }
    out.push(',');
    opt(out, t.rank);
    for v in [t.entropy, t.margin] {
        out.push(',');
        opt(out, v);
    }
    out.push(',');
    cell(out, &t.flags.join(" "));
    out.push(',');
    cell(out, &t.prefilled_meanwhile.join(" "));
    out.push_str("\r\n");
}

pub fn tokens_csv(d: &RequestDetail) -> String {
    let mut out = String::with_capacity(64 + d.tokens.len() * 120);
    out.push_str(HEADER);
    out.push_str("\r\n");
    for t in &d.tokens {
        row(&mut out, t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> String {
        let mut out = String::new();
        cell(&mut out, s);
        out
    }

    #[test]
    fn cells_are_quoted_only_when_they_must_be() {
        assert_eq!(text("hello"), "hello");
        assert_eq!(text(" a,b"), "\" a,b\"");
        assert_eq!(text("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(text("line\nbreak"), "\"line\nbreak\"");
        assert_eq!(text("-"), "-", "a lone minus is no formula");
    }

    #[test]
    fn formulas_stay_text() {
        assert_eq!(text("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(text("@SUM(A1)"), "\"'@SUM(A1)\"");
    }
}
