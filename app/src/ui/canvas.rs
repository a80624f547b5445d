//! What every canvas of the UI needs: a 2D context at the device's pixel ratio, and the clock and
//! frame records the browser benchmarks read. Browser only.

use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

/// The canvas's 2D context, its backing store sized to its CSS size times the pixel ratio.
pub fn context(
    canvas: &HtmlCanvasElement,
    css_w: u32,
    css_h: u32,
) -> Option<CanvasRenderingContext2d> {
    let ratio = web_sys::window()?.device_pixel_ratio().max(1.0);
    let (w, h) = (
        (f64::from(css_w) * ratio) as u32,
        (f64::from(css_h) * ratio) as u32,
    );
    if canvas.width() != w || canvas.height() != h {
        canvas.set_width(w);
        canvas.set_height(h);
    }
    let ctx: CanvasRenderingContext2d = canvas.get_context("2d").ok()??.dyn_into().ok()?;
    ctx.set_transform(ratio, 0.0, 0.0, ratio, 0.0, 0.0).ok()?;
    ctx.clear_rect(0.0, 0.0, f64::from(css_w), f64::from(css_h));
    Some(ctx)
}

pub fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Appends `v` to the page's `window[name]` array: what the browser benchmark reads.
pub fn record(name: &str, v: f64) {
    let Some(w) = web_sys::window() else { return };
    let key = wasm_bindgen::JsValue::from_str(name);
    let arr = js_sys::Reflect::get(&w, &key)
        .ok()
        .and_then(|a| a.dyn_into::<js_sys::Array>().ok())
        .unwrap_or_else(|| {
            let a = js_sys::Array::new();
            let _ = js_sys::Reflect::set(&w, &key, &a);
            a
        });
    arr.push(&v.into());
}

/// Listens to `name` on `target` for the element's life.
pub fn on<E: JsCast + 'static>(
    target: &web_sys::EventTarget,
    name: &str,
    f: impl FnMut(E) + 'static,
) {
    let mut f = f;
    let cb = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
        if let Ok(e) = e.dyn_into::<E>() {
            f(e)
        }
    });
    let _ = target.add_event_listener_with_callback(name, cb.as_ref().unchecked_ref());
    // The listener lives as long as the element; the element goes with the page.
    cb.forget();
}

/// The pointer's position within `canvas`, in CSS pixels.
pub fn local_xy(canvas: &web_sys::HtmlCanvasElement, e: &web_sys::MouseEvent) -> (f64, f64) {
    let r = canvas.get_bounding_client_rect();
    (
        f64::from(e.client_x()) - r.left(),
        f64::from(e.client_y()) - r.top(),
    )
}
