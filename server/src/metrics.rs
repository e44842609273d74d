//! `/metrics`: what the server did, in Prometheus' text format (`prometheus-client`). The
//! engine's service reports its work here as an [`Observer`]; the routes count answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hearth_engine::service::{Load, Observer};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The route (`/v1/chat/completions`), or `other` for paths that match none.
    pub route: String,
    pub status: u16,
}

/// Every series `/metrics` shows; cheap to update from any thread.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub prompt_tokens: Counter,
    pub generated_tokens: Counter,
    pub time_to_first_token: Histogram,
    pub time_per_output_token: Histogram,
    pub queued: Gauge,
    pub running: Gauge,
    pub kv_blocks_used: Gauge,
    pub kv_blocks_cached: Gauge,
    pub kv_blocks_total: Gauge,
    pub preemptions: Counter,
    /// Preemptions the service had reported at its last step.
    preemptions_seen: AtomicUsize,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hearth");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "HTTP requests answered, by route and status",
            requests.clone(),
        );
        let prompt_tokens = Counter::default();
        registry.register(
            "prompt_tokens",
            "Prompt tokens of accepted requests",
            prompt_tokens.clone(),
        );
        let generated_tokens = Counter::default();
        registry.register(
            "generation_tokens",
            "Tokens generated",
            generated_tokens.clone(),
        );
        // 5 ms to about 20 s.
        let time_to_first_token = Histogram::new(exponential_buckets(0.005, 2.0, 13));
        registry.register(
            "time_to_first_token_seconds",
            "From a request's arrival to its first token",
            time_to_first_token.clone(),
        );
        // 1 ms to about 4 s.
        let time_per_output_token = Histogram::new(exponential_buckets(0.001, 2.0, 13));
        registry.register(
            "time_per_output_token_seconds",
            "Between a completion's first token and its last, per later token",
            time_per_output_token.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let queued = gauge(
            &mut registry,
            "queue_depth",
            "Completions waiting for a row",
        );
        let running = gauge(
            &mut registry,
            "running_sequences",
            "Completions in a cache row",
        );
        let kv_blocks_used = gauge(
            &mut registry,
            "kv_blocks_used",
            "KV cache blocks the running completions hold",
        );
        let kv_blocks_cached = gauge(
            &mut registry,
            "kv_blocks_cached",
            "KV cache blocks only cached prefixes hold (free to take)",
        );
        let kv_blocks_total = gauge(&mut registry, "kv_blocks_total", "KV cache blocks");
        let preemptions = Counter::default();
        registry.register(
            "preemptions",
            "Sequences preempted for want of KV blocks (recomputed later)",
            preemptions.clone(),
        );
        Self {
            registry,
            requests,
            prompt_tokens,
            generated_tokens,
            time_to_first_token,
            time_per_output_token,
            queued,
            running,
            kv_blocks_used,
            kv_blocks_cached,
            kv_blocks_total,
            preemptions,
            preemptions_seen: AtomicUsize::new(0),
        }
    }

    pub fn answered(&self, route: &str, status: u16) {
        let labels = RequestLabels {
            route: route.to_string(),
            status,
        };
        self.requests.get_or_create(&labels).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer for Metrics {
    fn accepted(&self, prompt_tokens: usize) {
        self.prompt_tokens.inc_by(prompt_tokens as u64);
    }

    fn first_token(&self, wait: Duration) {
        self.time_to_first_token.observe(wait.as_secs_f64());
    }

    fn token(&self) {
        self.generated_tokens.inc();
    }

    fn per_token(&self, interval: Duration) {
        self.time_per_output_token.observe(interval.as_secs_f64());
    }

    fn load(&self, load: &Load) {
        self.running.set(load.running as i64);
        self.queued.set(load.queued as i64);
        self.kv_blocks_used.set(load.kv_blocks_running as i64);
        let cached = load.kv_blocks_used.saturating_sub(load.kv_blocks_running);
        self.kv_blocks_cached.set(cached as i64);
        self.kv_blocks_total.set(load.kv_blocks_total as i64);
        let before = self
            .preemptions_seen
            .swap(load.preemptions, Ordering::Relaxed);
        self.preemptions
            .inc_by(load.preemptions.saturating_sub(before) as u64);
    }
}
