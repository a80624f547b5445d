//! Fetches JSON from the tokenscope API in the browser.

use serde::de::DeserializeOwned;

/// GETs `url` and parses the JSON body. Runs only in the browser (resources are local).
#[cfg(feature = "hydrate")]
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    use wasm_bindgen::JsCast;
    use wasm_bindgen_futures::JsFuture;

    let js_err = |e: wasm_bindgen::JsValue| format!("{e:?}");
    let window = web_sys::window().ok_or("no window")?;
    let response: web_sys::Response = JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(js_err)?
        .dyn_into()
        .map_err(js_err)?;
    let body = JsFuture::from(response.text().map_err(js_err)?)
        .await
        .map_err(js_err)?
        .as_string()
        .unwrap_or_default();
    if !response.ok() {
        return Err(format!("{url}: HTTP {} {body}", response.status()));
    }
    serde_json::from_str(&body).map_err(|e| format!("{url}: {e}"))
}

/// On the server the page renders its loading state; the browser fetches after hydration.
#[cfg(not(feature = "hydrate"))]
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    Err(format!("{url} is fetched in the browser"))
}
