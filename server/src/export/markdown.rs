//! An incident as Markdown to paste into a ticket (Jira, GitHub, Slack): the title, the story in
//! the findings' sentences with their numbers, the victims and culprits, and the link.
//!
//! Every text is the user's or the model's: Markdown's active characters are escaped with a
//! backslash and line breaks folded, so a title cannot become a link, an image, HTML or a heading.

use std::fmt::Write;

use tokenscope_core::api::Incident;

/// Text as inert Markdown: one line, the characters that make emphasis, links, images, HTML,
/// headings, tables or code escaped (no `[` means no link; the rest stays readable).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '!' | '|' | '<' | '>' | '~' | '&' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// An identifier in a code span: inert except for backticks, which become quotes.
fn code(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| match c {
            '`' => '\'',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    format!("`{s}`")
}

/// The incident for a ticket; `url` is the incident page's full address.
pub fn incident(i: &Incident, url: &str) -> String {
    let s = &i.summary;
    let mut out = String::new();
    let _ = writeln!(out, "### {}", escape(&s.title));
    let _ = writeln!(out);
    for r in &i.snapshot.requests {
        for f in &r.diagnosis.findings {
            let _ = writeln!(
                out,
                "- **{}** {}: {}",
                escape(f.cause.name()),
                code(&r.detail.summary.request_id),
                escape(&f.summary)
            );
        }
        if r.diagnosis.findings.is_empty() {
            let _ = writeln!(
                out,
                "- {}: no finding (within the SLOs)",
                code(&r.detail.summary.request_id)
            );
        }
    }
    let ids = |v: &[String]| v.iter().map(|x| code(x)).collect::<Vec<_>>().join(", ");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Instance {} · victims {} · culprits {}",
        ids(&s.instances),
        ids(&s.victims),
        if s.culprits.is_empty() {
            "none".into()
        } else {
            ids(&s.culprits)
        }
    );
    if !i.note.trim().is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "> {}", escape(&i.note));
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Evidence (frozen): <{url}>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_text_is_inert() {
        assert_eq!(
            escape("<script>alert(1)</script>"),
            "\\<script\\>alert(1)\\</script\\>"
        );
        assert_eq!(escape("[x](http://y)"), "\\[x\\](http://y)");
        assert_eq!(escape("# head\nline"), "\\# head line");
        assert_eq!(escape("TPOT 75.5 ms > 50 ms"), "TPOT 75.5 ms \\> 50 ms");
        assert_eq!(code("a`b"), "`a'b`");
    }
}
