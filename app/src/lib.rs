#![recursion_limit = "256"]
//! tokenscope's shared crate: the unified trace model, pure analysis, the JSON API types, and the
//! Leptos UI. `model`, `analysis` and `api` do no IO and build for wasm32, so the browser and the
//! server compute with the same code.

pub mod analysis;
pub mod api;
pub mod html;
pub mod model;
pub mod ui;

pub use ui::{App, shell};

/// Entry point of the wasm bundle: attaches the UI to the server-rendered HTML.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
