//! How a token's text is shown: model output is untrusted, so it is always text (never markup),
//! special tokens become visible chips, and characters that would be invisible or reorder the
//! line (control, zero-width, bidirectional overrides, undecodable bytes) are shown as escapes.

use crate::api::TokenView;
use crate::model::SpecialToken;

/// One run of a token's display: plain text, or an escape shown as a chip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Odd(String),
}

/// The chip of a special token (`⟨EOS⟩`), or of a token with no text at all; `None` for text.
pub fn chip(t: &TokenView) -> Option<String> {
    let text = t.text.as_deref().unwrap_or("");
    match t.special {
        SpecialToken::Eos => Some("⟨EOS⟩".into()),
        SpecialToken::Bos => Some("⟨BOS⟩".into()),
        SpecialToken::Pad => Some("⟨pad⟩".into()),
        SpecialToken::Other if !text.is_empty() => Some(format!("⟨{text}⟩")),
        _ if text.is_empty() => Some(match t.token_id {
            Some(id) => format!("⟨id {id}⟩"),
            None => "⟨empty⟩".into(),
        }),
        _ => None,
    }
}

/// Characters that render as nothing or change how the text around them reads.
fn odd(c: char) -> Option<String> {
    match c {
        '\n' | '\t' => None,
        '\u{FFFD}' => Some("\u{FFFD} bytes".into()),
        c if c.is_control() => Some(if (c as u32) < 0x100 {
            format!("\\x{:02x}", c as u32)
        } else {
            format!("U+{:04X}", c as u32)
        }),
        '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{FEFF}'
        | '\u{00AD}' => Some(format!("U+{:04X}", c as u32)),
        _ => None,
    }
}

/// The pieces of a text; with `ws`, whitespace is drawn (`␣`, `↵`, `⇥`) and line breaks kept.
pub fn pieces(text: &str, ws: bool) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut run = String::new();
    for c in text.chars() {
        if let Some(esc) = odd(c) {
            if !run.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut run)));
            }
            out.push(Piece::Odd(esc));
            continue;
        }
        match (ws, c) {
            (true, ' ') => run.push('␣'),
            (true, '\u{00A0}') => run.push('⍽'),
            (true, '\t') => run.push('⇥'),
            (true, '\n') => run.push_str("↵\n"),
            _ => run.push(c),
        }
    }
    if !run.is_empty() {
        out.push(Piece::Text(run));
    }
    out
}

/// One line of plain text for a token (tooltips, lists, tables): chips and escapes inline.
pub fn plain(t: &TokenView) -> String {
    if let Some(c) = chip(t) {
        return c;
    }
    pieces(t.text.as_deref().unwrap_or(""), true)
        .into_iter()
        .map(|p| match p {
            Piece::Text(s) => s.replace('\n', ""),
            Piece::Odd(s) => format!("⟨{s}⟩"),
        })
        .collect()
}

/// A candidate's text the same way (candidates have no special flag: their spelling decides).
pub fn candidate(text: Option<&str>, token_id: Option<u32>) -> String {
    let view = TokenView {
        text: text.map(str::to_string),
        token_id,
        special: text.map_or(SpecialToken::None, SpecialToken::from_text),
        ..TokenView::default()
    };
    plain(&view)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str, special: SpecialToken) -> TokenView {
        TokenView {
            text: Some(text.into()),
            special,
            ..TokenView::default()
        }
    }

    #[test]
    fn special_and_empty_tokens_are_never_blank() {
        assert_eq!(
            chip(&token("<|endoftext|>", SpecialToken::Eos)).as_deref(),
            Some("⟨EOS⟩")
        );
        assert_eq!(
            chip(&token("<s>", SpecialToken::Bos)).as_deref(),
            Some("⟨BOS⟩")
        );
        assert_eq!(
            chip(&token("<|im_start|>", SpecialToken::Other)).as_deref(),
            Some("⟨<|im_start|>⟩")
        );
        assert_eq!(
            chip(&token("", SpecialToken::None)).as_deref(),
            Some("⟨empty⟩")
        );
        let mut id_only = token("", SpecialToken::None);
        id_only.token_id = Some(42);
        assert_eq!(chip(&id_only).as_deref(), Some("⟨id 42⟩"));
        assert_eq!(chip(&token(" hello", SpecialToken::None)), None);
    }

    #[test]
    fn whitespace_is_drawn_only_when_asked() {
        assert_eq!(pieces(" a\n", false), vec![Piece::Text(" a\n".into())]);
        assert_eq!(pieces(" a\n\t", true), vec![Piece::Text("␣a↵\n⇥".into())]);
    }

    #[test]
    fn invisible_and_control_characters_become_escapes() {
        assert_eq!(
            pieces("a\u{1b}[31mb\u{200B}\u{202E}\u{FFFD}", false),
            vec![
                Piece::Text("a".into()),
                Piece::Odd("\\x1b".into()),
                Piece::Text("[31mb".into()),
                Piece::Odd("U+200B".into()),
                Piece::Odd("U+202E".into()),
                Piece::Odd("\u{FFFD} bytes".into()),
            ]
        );
    }

    #[test]
    fn markup_is_just_text() {
        let t = token("<img src=x onerror=alert(1)>", SpecialToken::None);
        assert_eq!(plain(&t), "<img␣src=x␣onerror=alert(1)>");
        assert_eq!(chip(&t), None);
    }
}
