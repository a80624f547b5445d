//! An incident's link preview, drawn on the server with plotters: 1200×630 (the size chat and
//! ticket tools unfurl), the title and the story's first sentence, the victim's numbers, and the
//! frozen waterfall around the victim with its culprits marked. PNG (raster, fonts compiled in)
//! and SVG (the same drawing; plotters escapes its text).
//!
//! All text is the user's or the model's: control characters are replaced and long lines cut
//! before drawing, so no title can break the picture or the SVG.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use tokenscope_core::analysis::waterfall::Track;
use tokenscope_core::api::{Incident, StageKind};
use tokenscope_core::model::Nanos;

use crate::error::{Error, Result};

pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 630;

/// The PNG draws it with the DejaVu Sans compiled in; the SVG names it, and viewers use their own.
const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../../data/fonts/DejaVuSans.ttf");

const INK: RGBColor = RGBColor(0x1d, 0x24, 0x30);
const MUTED: RGBColor = RGBColor(0x5b, 0x64, 0x73);
const LINE: RGBColor = RGBColor(0xdd, 0xe1, 0xe7);
const STALL: RGBColor = RGBColor(0xd5, 0x5e, 0x00);

fn colour(k: StageKind) -> RGBColor {
    match k {
        StageKind::Queued => RGBColor(0xbb, 0xbb, 0xbb),
        StageKind::Prefill => RGBColor(0xe6, 0x9f, 0x00),
        StageKind::Decode => RGBColor(0x00, 0x72, 0xb2),
        StageKind::Preempted => RGBColor(0xcc, 0x79, 0xa7),
        StageKind::KvTransfer => RGBColor(0x00, 0x9e, 0x73),
    }
}

/// Text safe to draw: no control characters (invalid in XML, invisible in a picture), at most
/// `max` characters with an ellipsis.
pub fn clean(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// Splits `s` into at most `lines` lines of about `width` characters, at spaces.
fn wrap(s: &str, width: usize, lines: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in s.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::take(&mut cur));
            if out.len() == lines {
                if let Some(last) = out.last_mut() {
                    last.push('…');
                }
                return out;
            }
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn register_font() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()
    });
    ok.then_some(())
        .ok_or_else(|| Error::Internal("the preview font does not load".into()))
}

type Area<'a, DB> = DrawingArea<DB, Shift>;

fn err<E: std::fmt::Debug>(e: E) -> Error {
    Error::Internal(format!("drawing the preview: {e:?}"))
}

/// The rows the preview shows: the victim's, the culprits pulled below it, then neighbours.
fn rows_shown(incident: &Incident, max: usize) -> Vec<&Track> {
    let w = &incident.snapshot.waterfall;
    let focus = w.focus_row.unwrap_or(0);
    let first = focus.saturating_sub(2);
    let mut rows: Vec<&Track> = w.tracks.iter().filter(|t| t.row >= first).collect();
    rows.sort_by_key(|t| t.row);
    rows.truncate(max);
    rows
}

fn draw<DB: DrawingBackend>(root: &Area<DB>, incident: &Incident) -> Result<()> {
    let s = &incident.summary;
    root.fill(&WHITE).map_err(err)?;
    let text = |size: u32, colour: RGBColor| (FONT, size).into_font().color(&colour);
    // The story: title, first sentence, the victim's numbers.
    root.draw(&Text::new(clean(&s.title, 70), (40, 30), text(34, INK)))
        .map_err(err)?;
    for (k, line) in wrap(&clean(&s.headline, 400), 95, 2).iter().enumerate() {
        root.draw(&Text::new(
            line.clone(),
            (40, 82 + 28 * k as i32),
            text(21, STALL),
        ))
        .map_err(err)?;
    }
    let numbers = incident.snapshot.requests.first().map(|r| {
        let m = &r.detail.summary;
        let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0} ms"));
        format!(
            "victim {} on {} · TTFT {} · TPOT {} · {} → {} tokens",
            clean(&m.request_id, 40),
            clean(&m.instance, 30),
            ms(m.ttft_ms),
            ms(m.tpot_ms),
            m.prompt_tokens,
            m.output_tokens
        )
    });
    if let Some(n) = numbers {
        root.draw(&Text::new(n, (40, 146), text(18, MUTED)))
            .map_err(err)?;
    }
    tracks(root, incident)?;
    let footer = format!(
        "tokenscope · {} · {} victim{} · {} culprit{}",
        clean(&s.instances.join(", "), 40),
        s.victims.len(),
        if s.victims.len() == 1 { "" } else { "s" },
        s.culprits.len(),
        if s.culprits.len() == 1 { "" } else { "s" },
    );
    root.draw(&Text::new(
        footer,
        (40, HEIGHT as i32 - 34),
        text(16, MUTED),
    ))
    .map_err(err)?;
    Ok(())
}

/// The frozen waterfall: a row per request, its stages as bars, the victim's row shaded and
/// the culprits' rows marked.
fn tracks<DB: DrawingBackend>(root: &Area<DB>, incident: &Incident) -> Result<()> {
    let w = &incident.snapshot.waterfall;
    let (top, bottom, left, right) = (186i32, HEIGHT as i32 - 60, 300i32, WIDTH as i32 - 40);
    let rows = rows_shown(incident, 14);
    let row_h = ((bottom - top) / rows.len().max(8) as i32).min(30);
    let span = (w.to_ns - w.from_ns).max(1) as f64;
    let x = |t: Nanos| left + ((t - w.from_ns) as f64 / span * f64::from(right - left)) as i32;
    let clip = |v: i32| v.clamp(left, right);
    let font = |size: u32, colour: RGBColor| (FONT, size).into_font().color(&colour);
    root.draw(&Rectangle::new(
        [(left, top - 4), (right, top - 3)],
        LINE.filled(),
    ))
    .map_err(err)?;
    for (k, t) in rows.iter().enumerate() {
        let y = top + k as i32 * row_h;
        let victim = incident.summary.victims.contains(&t.request_id);
        let culprit = incident.summary.culprits.contains(&t.request_id);
        if victim {
            root.draw(&Rectangle::new(
                [(40, y), (right, y + row_h - 2)],
                RGBColor(0xe3, 0xee, 0xf7).filled(),
            ))
            .map_err(err)?;
        }
        let label = format!(
            "{}{}",
            if culprit { "◆ " } else { "" },
            clean(&t.request_id, 24)
        );
        let label_colour = if culprit { STALL } else { INK };
        root.draw(&Text::new(
            label,
            (48, y + row_h / 2 - 8),
            font(15, label_colour),
        ))
        .map_err(err)?;
        for seg in &t.segments {
            let (x0, x1) = (clip(x(seg.start_ns)), clip(x(seg.end_ns)));
            if x1 <= left || x0 >= right {
                continue;
            }
            root.draw(&Rectangle::new(
                [(x0, y + 4), ((x1).max(x0 + 1), y + row_h - 6)],
                colour(seg.kind).filled(),
            ))
            .map_err(err)?;
        }
        if culprit {
            root.draw(&Rectangle::new(
                [
                    (clip(x(t.arrival_ns)), y + 2),
                    (clip(x(t.finished_ns)), y + row_h - 4),
                ],
                STALL.stroke_width(2),
            ))
            .map_err(err)?;
        }
        // Where the victim waited past its SLOs: a band under its bar.
        let th = tokenscope_core::analysis::diagnosis::Thresholds::default();
        for r in incident
            .snapshot
            .requests
            .iter()
            .filter(|r| r.detail.summary.request_id == t.request_id)
        {
            for (a, b) in r.detail.stalls(th.ttft_ms, th.tpot_ms) {
                let (x0, x1) = (clip(x(a)), clip(x(b)));
                root.draw(&Rectangle::new(
                    [(x0, y + row_h - 7), (x1.max(x0 + 2), y + row_h - 2)],
                    STALL.filled(),
                ))
                .map_err(err)?;
            }
        }
    }
    let mut lx = left;
    for kind in StageKind::ALL {
        let name = kind.label();
        root.draw(&Rectangle::new(
            [(lx, bottom + 8), (lx + 14, bottom + 18)],
            colour(kind).filled(),
        ))
        .map_err(err)?;
        root.draw(&Text::new(name, (lx + 19, bottom + 5), font(14, MUTED)))
            .map_err(err)?;
        lx += 30 + 9 * name.len() as i32;
    }
    root.draw(&Text::new("◆ culprit", (lx, bottom + 5), font(14, STALL)))
        .map_err(err)?;
    root.draw(&Rectangle::new(
        [(lx + 90, bottom + 11), (lx + 104, bottom + 16)],
        STALL.filled(),
    ))
    .map_err(err)?;
    root.draw(&Text::new(
        "stalled past the SLO",
        (lx + 109, bottom + 5),
        font(14, STALL),
    ))
    .map_err(err)?;
    Ok(())
}

pub fn svg(incident: &Incident) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, incident)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

pub fn png(incident: &Incident) -> Result<Vec<u8>> {
    register_font()?;
    let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, incident)?;
        root.present().map_err(err)?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, WIDTH, HEIGHT);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(err)?;
        w.write_image_data(&rgb).map_err(err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cleaned_and_wrapped() {
        assert_eq!(clean("a\u{1b}[31mb\nc", 100), "a [31mb c");
        assert_eq!(clean("abcdef", 3), "abc…");
        assert_eq!(
            wrap("one two three four", 9, 5),
            ["one two", "three", "four"]
        );
        assert_eq!(wrap("one two three four", 9, 1), ["one two…"]);
    }
}
