//! Embedding throughput: sentences per second through a loaded [`Embedder`] at each batch
//! size, batches of short English sentences (about a dozen tokens each, what retrieval
//! tools embed as queries and sentence chunks), as sentence-transformers' own benchmarks
//! count them.

use std::time::Instant;

use hearth_engine::{Embedder, Result};
use serde::Serialize;

use super::stats::mean_sd;

/// The sentences batches are cut from, repeated as a batch needs.
const SENTENCES: &[&str] = &[
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome and everyone should see it.",
    "How do I reset my password if I no longer have the email?",
    "Local models keep private documents on the machine they came from.",
];

#[derive(Clone, Debug)]
pub struct EmbedBenchParams {
    /// Texts per call of [`Embedder::embed`].
    pub batches: Vec<usize>,
    /// Timed calls per batch size, after one untimed.
    pub reps: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct EmbedBenchRow {
    pub batch: usize,
    /// Tokens per text, on average ([CLS] and [SEP] included).
    pub tokens_per_text: f64,
    pub sentences_per_s: f64,
    pub sentences_per_s_sd: f64,
    pub tokens_per_s: f64,
    pub reps: usize,
}

/// Times `embedder` at each batch size of `params`.
pub fn bench_embed(
    embedder: &mut Embedder,
    params: &EmbedBenchParams,
) -> Result<Vec<EmbedBenchRow>> {
    let mut rows = Vec::new();
    for &batch in &params.batches {
        let texts: Vec<&str> = SENTENCES
            .iter()
            .copied()
            .cycle()
            .take(batch.max(1))
            .collect();
        let tokens: usize = texts.iter().map(|t| embedder.tokenize(t).len()).sum();
        embedder.embed(&texts)?;
        let mut rates = Vec::with_capacity(params.reps.max(1));
        for _ in 0..params.reps.max(1) {
            let start = Instant::now();
            embedder.embed(&texts)?;
            rates.push(texts.len() as f64 / start.elapsed().as_secs_f64());
        }
        let (rate, sd) = mean_sd(&rates);
        let per_text = tokens as f64 / texts.len() as f64;
        rows.push(EmbedBenchRow {
            batch: texts.len(),
            tokens_per_text: per_text,
            sentences_per_s: rate,
            sentences_per_s_sd: sd,
            tokens_per_s: rate * per_text,
            reps: rates.len(),
        });
    }
    Ok(rows)
}
