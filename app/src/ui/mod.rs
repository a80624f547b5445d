//! The browser UI (Leptos, rendered on the server with its data and hydrated in the browser).
//! One folder per page; every view's state is in its URL.

#[cfg(feature = "hydrate")]
pub mod canvas;
pub mod chart;
mod compare;
pub mod explorer;
pub mod fetch;
pub mod finding;
pub mod format;
pub mod incident;
pub mod live;
pub mod request;
pub mod time;
pub mod upload;
mod usage;
pub mod waterfall;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    SsrMode, StaticSegment,
    components::{Route, Router, Routes},
    path,
};

/// The HTML document around the app; the server renders it for every page.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="/favicon.svg" type="image/svg+xml"/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    // Times render in UTC on the server and switch to the viewer's zone once the page is live.
    let zone = RwSignal::new(time::Zone::default());
    provide_context(zone);
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        zone.set(time::Zone::detect());
        // Tests and benchmarks wait for this rather than guessing when the page is live.
        if let Some(w) = web_sys::window() {
            let _ = js_sys::Reflect::set(&w, &"__tsHydrated".into(), &true.into());
        }
    });
    view! {
        <Stylesheet id="tokenscope" href="/pkg/tokenscope.css"/>
        <Title formatter=head_title text="tokenscope"/>
        <Router>
            <header class="topbar">
                <a class="brand" href="/">"tokenscope"</a>
                <nav>
                    <a href="/">"Explorer"</a>
                    <a href="/waterfall">"Waterfall"</a>
                    <a href="/compare">"Compare"</a>
                    <a href="/usage">"GPU time"</a>
                    <a href="/incidents">"Incidents"</a>
                    <ReaderLinks/>
                </nav>
            </header>
            <main>
                <Routes fallback=|| view! { <NotFound/> }>
                    <Route path=StaticSegment("") view=explorer::Explorer ssr=SsrMode::Async/>
                    <Route path=StaticSegment("waterfall") view=waterfall::WaterfallPage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("compare") view=compare::Compare ssr=SsrMode::Async/>
                    <Route path=path!("/requests/:id") view=request::RequestPage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("usage") view=usage::UsagePage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("upload") view=upload::Upload/>
                    <Route path=StaticSegment("incidents") view=incident::IncidentList ssr=SsrMode::Async/>
                    <Route path=path!("/incidents/:slug") view=incident::IncidentPage ssr=SsrMode::Async/>
                </Routes>
            </main>
        </Router>
    }
}

/// What depends on who reads: upload for a reader who sees everything; for a reader scoped to
/// tenants, whose requests it sees (and no upload, which it may not use).
#[component]
fn ReaderLinks() -> impl IntoView {
    let me = Resource::new(
        || (),
        |_| fetch::get_json::<crate::api::Me>("/api/v1/me".into()),
    );
    view! {
        <Suspense fallback=|| ()>
            {move || me.get().map(|r| match r.ok().and_then(|m| m.tenants) {
                None => view! { <a href="/upload">"Upload"</a> }.into_any(),
                Some(tenants) => view! {
                    <span class="reader-scope" data-testid="reader-scope"
                        title="You see these tenants' requests; others' appear only as aliases where they affected yours">
                        {format!("tenant: {}", tenants.join(", "))}
                    </span>
                }.into_any(),
            })}
        </Suspense>
    }
}

/// Every page's title passes through this formatter, set once here at the root. leptos_meta 0.8
/// writes the title into the server-rendered `<head>` as it is (its `<Meta>` attributes are
/// escaped, the title is not), so an incident titled `</title><script>…` became a script in
/// the page. On the server the title is escaped here, whatever a page sets; in the browser it is
/// set through `document.title`, which takes text. `server/tests/it/incidents.rs` checks the head
/// holds the title escaped exactly once, so a leptos_meta that starts escaping shows up there.
fn head_title(text: String) -> String {
    if cfg!(feature = "ssr") {
        crate::html::escape(&text)
    } else {
        text
    }
}

#[component]
fn NotFound() -> impl IntoView {
    view! {
        <section class="panel">
            <h1>"Not found"</h1>
            <p>"This page does not exist. " <a href="/">"Back to the explorer"</a></p>
        </section>
    }
}
