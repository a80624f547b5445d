//! Text as HTML: the one escaping used wherever markup is written by hand (the document head's
//! title, the server's sign-in and revoked pages).

/// `s` as the text of an element or a double-quoted attribute value: it can close neither the
/// element it sits in (`</title>`) nor the attribute (`"`).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn text_that_closes_its_element_or_attribute_stays_text() {
        assert_eq!(
            escape("</title><script>alert(1)</script>"),
            "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(
            escape(r#"" onload='x' &amp;"#),
            "&quot; onload=&#39;x&#39; &amp;amp;"
        );
        assert_eq!(escape("plain \u{202e} text"), "plain \u{202e} text");
    }
}
