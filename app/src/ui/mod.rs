//! The browser UI (Leptos, rendered on the server and hydrated in the browser).

mod explorer;
mod fetch;
pub mod format;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::{
    StaticSegment,
    components::{Route, Router, Routes},
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
    view! {
        <Stylesheet id="tokenscope" href="/pkg/tokenscope.css"/>
        <Title text="tokenscope"/>
        <Router>
            <header class="topbar">
                <a class="brand" href="/">"tokenscope"</a>
                <nav>
                    <a href="/">"Explorer"</a>
                </nav>
            </header>
            <main>
                <Routes fallback=|| view! { <NotFound/> }>
                    <Route path=StaticSegment("") view=explorer::Explorer/>
                </Routes>
            </main>
        </Router>
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
