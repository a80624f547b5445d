//! tokenscope's core: the unified trace model, pure analysis on it, and the JSON API's types.
//! No IO and no UI framework; it builds for wasm32 and native, so the browser and the server
//! compute with the same code. Inside, layers point one way: `model` → `analysis` → `api`.
//! `query`, `links` and `html` are the web's plain formats (query strings, the pages' links,
//! HTML text) that the server and the UI both write.

pub mod analysis;
pub mod api;
pub mod html;
pub mod links;
pub mod model;
pub mod query;
