//! Fetches JSON from the tokenscope API: over HTTP in the browser, and in-process on the server
//! (through the `ApiClient` the server provides), so a server-rendered page arrives with its
//! data and the browser picks the same values up when it hydrates.

use std::future::Future;

use serde::de::DeserializeOwned;

#[cfg(feature = "ssr")]
use crate::api::ApiClient;

/// GETs `url` (a path under `/api/v1/`) and parses the JSON body; errors are sentences for the
/// page (the API's own message when it gave one).
pub fn get_json<T: DeserializeOwned + Send + 'static>(
    url: String,
) -> impl Future<Output = Result<T, String>> + Send + 'static {
    #[cfg(feature = "hydrate")]
    {
        // Browser futures are not `Send`; they only ever run on the page's one thread.
        let text = send_wrapper::SendWrapper::new(browser::get_text(url.clone()));
        async move { parse(&url, text.await) }
    }
    #[cfg(all(feature = "ssr", not(feature = "hydrate")))]
    {
        // Taken now: the context belongs to the page being rendered, not to the future.
        let client = leptos::prelude::use_context::<ApiClient>();
        async move {
            let client = client.ok_or("no API on this server")?;
            parse(&url, (client.0)(url.clone()).await)
        }
    }
    #[cfg(not(any(feature = "hydrate", feature = "ssr")))]
    {
        async move { Err(format!("{url}: no way to fetch in this build")) }
    }
}

/// POSTs `body` to `url` from the browser and parses the JSON reply (upload, incidents; the
/// server never posts to itself).
#[cfg(feature = "hydrate")]
pub async fn post_json<T: DeserializeOwned>(url: String, body: String) -> Result<T, String> {
    parse(&url, browser::send("POST", url.clone(), Some(body)).await)
}

/// Sends `method` (DELETE, …) to `url` from the browser; the reply's body, or the error.
#[cfg(feature = "hydrate")]
pub async fn send(method: &str, url: String) -> Result<String, String> {
    browser::send(method, url, None).await
}

/// GETs `url` as text from the browser (Markdown for a ticket).
#[cfg(feature = "hydrate")]
pub async fn get_text(url: String) -> Result<String, String> {
    browser::get_text(url).await
}

fn parse<T: DeserializeOwned>(url: &str, body: Result<String, String>) -> Result<T, String> {
    serde_json::from_str(&body?).map_err(|e| format!("{url}: unexpected reply ({e})"))
}

#[cfg(feature = "hydrate")]
mod browser {
    use wasm_bindgen::JsCast;
    use wasm_bindgen_futures::JsFuture;

    fn js_err(e: wasm_bindgen::JsValue) -> String {
        format!(
            "could not reach the server ({})",
            e.as_string().unwrap_or_default()
        )
    }

    pub async fn get_text(url: String) -> Result<String, String> {
        let window = web_sys::window().ok_or("no window")?;
        text(JsFuture::from(window.fetch_with_str(&url))).await
    }

    pub async fn send(method: &str, url: String, body: Option<String>) -> Result<String, String> {
        let window = web_sys::window().ok_or("no window")?;
        let init = web_sys::RequestInit::new();
        init.set_method(method);
        if let Some(body) = body {
            init.set_body(&wasm_bindgen::JsValue::from_str(&body));
        }
        text(JsFuture::from(window.fetch_with_str_and_init(&url, &init))).await
    }

    async fn text(fetch: JsFuture) -> Result<String, String> {
        let response: web_sys::Response =
            fetch.await.map_err(js_err)?.dyn_into().map_err(js_err)?;
        let body = JsFuture::from(response.text().map_err(js_err)?)
            .await
            .map_err(js_err)?
            .as_string()
            .unwrap_or_default();
        if !response.ok() {
            return Err(crate::api::error_text(response.status(), &body));
        }
        Ok(body)
    }
}
