#![recursion_limit = "256"]
//! The browser app: the Leptos UI (pages, components, the hydrate entry), rendered on the server
//! and hydrated in the browser. What it computes with (the model, the analysis, the API's types)
//! is `tokenscope_core`'s; the server mounts [`App`] and [`shell`] and uses nothing else of it.

// Core's modules under the names the UI has always used; private, so nothing reaches core
// through the UI crate.
use tokenscope_core::{analysis, api, html, links, model, query};

pub mod ui;

pub use ui::{App, shell};

/// Entry point of the wasm bundle: attaches the UI to the server-rendered HTML.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
