//! Backpressure: request bodies in flight are held to a byte budget, on every ingest port.
//!
//! A request's body counts against the budget as its bytes arrive (after decompression on HTTP),
//! and stays counted until its reply is ready: until the batch is stored and committed, or
//! refused. A request that would take the budget past its size is refused at once, and its body
//! is not read further: HTTP answers 429 with `Retry-After`, gRPC `RESOURCE_EXHAUSTED`, which is
//! what OTLP exporters retry on. So memory held by bodies is bounded whatever the number of
//! clients, and a client sending faster than the database commits is told to back off instead of
//! queueing without end.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use axum::body::Bytes;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// Seconds a refused client is asked to wait (`Retry-After`).
const RETRY_AFTER_S: u32 = 1;

/// The budget shared by the HTTP and gRPC ports: one permit per byte.
#[derive(Clone)]
pub struct Budget {
    permits: Arc<Semaphore>,
    bytes: usize,
    /// Where refusals are counted.
    metrics: Arc<Metrics>,
}

impl Budget {
    pub fn new(bytes: usize, metrics: Arc<Metrics>) -> Self {
        let bytes = bytes.min(Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(bytes)),
            bytes,
            metrics,
        }
    }

    /// Bytes of request bodies held now.
    pub fn in_use(&self) -> usize {
        self.bytes - self.permits.available_permits()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `n` more bytes, or none when that would pass the budget.
    fn take(&self, n: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n).ok()?;
        self.permits.clone().try_acquire_many_owned(n).ok()
    }

    fn refusal(&self) -> String {
        format!(
            "ingest is over its budget ({} MiB of request bodies in flight, --ingest-budget-mib); retry in {RETRY_AFTER_S} s",
            self.bytes >> 20
        )
    }
}

/// A port's body type: how a metered body becomes one again, and how the port says "over
/// budget".
pub trait PortBody: Body<Data = Bytes> + Sized + Send + Unpin + 'static {
    fn metered(body: Metered<Self>) -> Self;
    fn refuse(message: String) -> Response<Self>;
}

impl PortBody for axum::body::Body {
    fn metered(body: Metered<Self>) -> Self {
        axum::body::Body::new(body)
    }

    fn refuse(message: String) -> Response<Self> {
        let body = serde_json::json!({ "error": message }).to_string();
        let mut r = Response::new(axum::body::Body::from(body));
        *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let h = r.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

impl PortBody for tonic::body::Body {
    fn metered(body: Metered<Self>) -> Self {
        tonic::body::Body::new(body)
    }

    fn refuse(message: String) -> Response<Self> {
        tonic::Status::resource_exhausted(message).into_http()
    }
}

/// What one request holds: its bytes, and whether it was refused on the way.
#[derive(Default)]
struct Held {
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    refused: AtomicBool,
}

impl Held {
    fn add(&self, p: OwnedSemaphorePermit) {
        let mut held = self.permit.lock().expect("budget permit poisoned");
        match held.as_mut() {
            Some(h) => h.merge(p),
            None => *held = Some(p),
        }
    }

    fn release(&self) {
        self.permit.lock().expect("budget permit poisoned").take();
    }
}

#[derive(Clone)]
pub struct BudgetLayer(pub Budget);

impl<S> Layer<S> for BudgetLayer {
    type Service = WithBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WithBudget {
            inner,
            budget: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct WithBudget<S> {
    inner: S,
    budget: Budget,
}

impl<S, B> Service<Request<B>> for WithBudget<S>
where
    S: Service<Request<B>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: PortBody,
    B::Error: Into<tower::BoxError>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let held = Arc::new(Held::default());
        // A declared length is taken up front: refused before a byte of the body is read. One
        // longer than the whole budget is left to the message-size limit (413), which would
        // otherwise never be reached: "retry later" would be a lie.
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
            .filter(|&n| n <= self.budget.bytes)
            .unwrap_or(0);
        if declared > 0 {
            match self.budget.take(declared) {
                Some(p) => held.add(p),
                None => {
                    let refusal = refuse(&self.budget);
                    return Box::pin(async move { Ok(refusal) });
                }
            }
        }
        let budget = self.budget.clone();
        let req = req.map(|body| {
            B::metered(Metered {
                inner: body,
                budget: budget.clone(),
                held: held.clone(),
                declared,
                seen: 0,
            })
        });
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await;
            held.release();
            if held.refused.load(Ordering::Relaxed) {
                return Ok(refuse(&budget));
            }
            response
        })
    }
}

fn refuse<B: PortBody>(budget: &Budget) -> Response<B> {
    budget.metrics.over_budget();
    B::refuse(budget.refusal())
}

/// A request body that takes its bytes from the budget as they arrive.
pub struct Metered<B> {
    inner: B,
    budget: Budget,
    held: Arc<Held>,
    /// The declared length, taken up front (0 when none was taken).
    declared: usize,
    /// Bytes of this body so far.
    seen: usize,
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<tower::BoxError>,
{
    type Data = Bytes;
    type Error = tower::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        let Some(Ok(frame)) = frame else {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        };
        if let Some(data) = frame.data_ref() {
            let before = self.seen;
            self.seen += data.len();
            // Only the bytes past the declared length are new to the budget.
            let more = self.seen.saturating_sub(before.max(self.declared));
            // A body longer than the whole budget could never be admitted: its bytes pass
            // untaken to the message-size limit (at most the budget), which refuses it as too
            // large; "retry later" would never come true.
            if more > 0 && self.seen <= self.budget.bytes {
                match self.budget.take(more) {
                    Some(p) => self.held.add(p),
                    None => {
                        self.held.refused.store(true, Ordering::Relaxed);
                        return Poll::Ready(Some(Err(self.budget.refusal().into())));
                    }
                }
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
