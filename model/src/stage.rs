//! A model split between executors (`--gpu-layers`, `--devices 0,1`): each executor holds a
//! [`Part`], a run of consecutive layers with their KV cache, and runs it as a [`Stage`]. The
//! residual stream crosses from one stage to the next once per step, in host memory.

use std::ops::Range;

use serde::Serialize;

use crate::backend::{BatchedBackend, SeqStep};
use crate::error::{Error, Result};
use crate::shard::Shard;

/// Which of a model's parts one executor holds: the layers `layers` of `n_layer`, with the
/// token embedding where they start the model and the final norm and output head where they
/// end it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub layers: Range<usize>,
    pub n_layer: usize,
    /// Where the layers are divided by rows among devices: this device's share of each.
    pub shard: Option<Shard>,
}

impl Part {
    /// The whole model.
    pub fn whole(n_layer: usize) -> Self {
        Self {
            layers: 0..n_layer,
            n_layer,
            shard: None,
        }
    }

    /// Layers `layers` of a model of `n_layer`; an error unless that is at least one layer
    /// of the model.
    pub fn new(layers: Range<usize>, n_layer: usize) -> Result<Self> {
        if layers.start >= layers.end || layers.end > n_layer {
            return Err(Error::options(
                "layers",
                format!(
                    "{}..{} is not a run of the model's {n_layer} layers",
                    layers.start, layers.end
                ),
            ));
        }
        Ok(Self {
            layers,
            n_layer,
            shard: None,
        })
    }

    /// This part holding only `shard`'s share of its layers.
    pub fn with_shard(self, shard: Option<Shard>) -> Self {
        Self { shard, ..self }
    }

    /// Holds all of its layers' rows, or is the first of the devices sharing them (which
    /// embeds and computes the logits for all).
    fn leads(&self) -> bool {
        self.shard.as_ref().is_none_or(|s| s.index == 0)
    }

    /// The part holds `layers` of `n_layer`, or the whole model.
    pub fn of(layers: Option<Range<usize>>, n_layer: usize) -> Result<Self> {
        match layers {
            Some(layers) => Self::new(layers, n_layer),
            None => Ok(Self::whole(n_layer)),
        }
    }

    /// Starts the model: token ids come in and are embedded here.
    pub fn embeds(&self) -> bool {
        self.layers.start == 0 && self.leads()
    }

    /// Ends the model: the final norm and the output head turn its last layer into logits.
    pub fn heads(&self) -> bool {
        self.layers.end == self.n_layer && self.leads()
    }

    pub fn is_whole(&self) -> bool {
        self.embeds() && self.heads() && self.shard.is_none()
    }

    /// Layers held.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// An error for a plain step on an executor that holds only part of the model.
    pub fn not_whole(&self) -> Error {
        Error::options(
            "layers",
            format!(
                "this executor holds layers {}..{} of {}; a split model steps through all \
                 of its executors",
                self.layers.start, self.layers.end, self.n_layer
            ),
        )
    }
}

/// What a stage's step hands on.
#[derive(Debug)]
pub enum StageOutput {
    /// The residual stream after the stage's last layer, [tokens, n_embd] in the order of
    /// the step's sequences and their tokens.
    Hidden(Vec<f32>),
    /// The logits each sequence asked for (the stage ends the model).
    Logits(Vec<Vec<f32>>),
}

/// An executor running one [`Part`] of a split model. Its block tables follow the first
/// stage's ([`KvTables::follow`](crate::kv::KvTables::follow)) before each step, and every
/// stage takes a step's new blocks in the order of its `seqs`, so each stores a position's K
/// and V in the same block.
pub trait Stage: BatchedBackend + Send {
    fn part(&self) -> &Part;
    /// One step over the part's layers: each sequence's tokens appended to its row, as
    /// [`BatchedBackend::step_batch`] does. `hidden` is the residual stream entering the
    /// first layer ([tokens, n_embd], in the order of `seqs`) where the part does not embed.
    fn step_stage(&mut self, seqs: &[SeqStep], hidden: Option<&[f32]>) -> Result<StageOutput>;
    /// Where it runs and what it holds.
    fn placed(&self) -> PlacedPart;
    /// A row split's step begins: the sequences' tokens appended to their rows, as
    /// [`step_stage`](Self::step_stage) appends them, for the [`Sublayer`]s that follow.
    fn begin_rows(&mut self, _seqs: &[SeqStep]) -> Result<()> {
        Err(no_rows())
    }
    /// One piece of a row split's step: [`Sublayer::Embed`] and [`Sublayer::Head`] on the
    /// first device, each layer's halves on every device, which returns its partial sum of
    /// the half's output (the residual stream not included) in the order of `seqs`.
    fn step_rows(
        &mut self,
        _seqs: &[SeqStep],
        _sub: Sublayer,
        _hidden: Option<&[f32]>,
    ) -> Result<StageOutput> {
        Err(no_rows())
    }
    /// The row split's step is over; where it failed (`ok` false) the rows go back to their
    /// lengths before it.
    fn end_rows(&mut self, _ok: bool) {}
    /// This executor as a plain backend (a part that holds the whole model).
    fn into_backend(self: Box<Self>) -> Box<dyn crate::Backend + Send>;
}

/// A piece of a step of a row split, each a submission of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sublayer {
    /// The step's tokens embedded: the residual stream entering the first layer.
    Embed,
    /// Layer `l`'s attention: norm, this device's heads, their part of the output projection.
    Attention(usize),
    /// Layer `l`'s MLP: norm, this device's units, their part of the down projection.
    Mlp(usize),
    /// The final norm and the output head: the logits each sequence asked for.
    Head,
}

fn no_rows() -> Error {
    Error::options("split", "this executor does not run a row split")
}

/// What one executor of a model holds, for `hearth inspect --placement` and benchmarks.
#[derive(Clone, Debug, Serialize)]
pub struct PlacedPart {
    /// "cpu" or "vulkan:N".
    pub executor: String,
    /// The device's name ("NVIDIA H100", "CPU (avx2, 8 threads)").
    pub device: String,
    /// First layer and one past the last.
    pub layers: [usize; 2],
    /// Holds the token embedding (embeds the step's tokens).
    pub embedding: bool,
    /// Holds the final norm and the output head (computes the logits).
    pub head: bool,
    /// Bytes of weights held.
    pub weight_bytes: u64,
    /// Bytes of its layers' KV cache.
    pub kv_bytes: u64,
    /// Time its steps took since load, hidden state crossings included (nanoseconds).
    pub busy_ns: u64,
    /// Its share of the layers where they are divided by rows among devices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// The check every stage makes of a step's hidden input: present exactly where the part
/// does not embed, and one row per token.
pub fn check_hidden(part: &Part, seqs: &[SeqStep], hidden: Option<&[f32]>, e: usize) -> Result<()> {
    let n: usize = seqs.iter().map(|s| s.tokens.len()).sum();
    match (part.embeds(), hidden) {
        (true, None) => Ok(()),
        (true, Some(_)) => Err(Error::options(
            "hidden",
            "the part that embeds tokens takes no hidden state",
        )),
        (false, None) => Err(Error::options(
            "hidden",
            format!(
                "layer {} needs the hidden state of the layers before it",
                part.layers.start
            ),
        )),
        (false, Some(h)) if h.len() != n * e => Err(Error::options(
            "hidden",
            format!("{} values for {n} tokens of {e}", h.len()),
        )),
        (false, Some(_)) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_know_their_ends() {
        let p = Part::new(0..4, 10).unwrap();
        assert!(p.embeds() && !p.heads() && !p.is_whole());
        let p = Part::new(4..10, 10).unwrap();
        assert!(!p.embeds() && p.heads());
        assert!(Part::whole(10).is_whole());
        for (start, end) in [(3, 3), (5, 11), (6, 2)] {
            let err = Part::new(start..end, 10).unwrap_err().to_string();
            assert!(err.contains("10 layers"), "{err}");
        }
    }
}
