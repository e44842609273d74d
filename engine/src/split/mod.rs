//! A model split between executors: consecutive layers on each (`--gpu-layers`: the first
//! layers on the native CPU executor, the rest on a Vulkan device; `--devices`: several
//! Vulkan devices), stepped one after another with the residual stream crossing between them
//! in host memory, once per boundary per step. Every stage keeps the KV cache of its own
//! layers in blocks numbered alike: the first stage's block tables are the model's, and the
//! others follow them before each step.

pub mod load;
pub mod plan;

pub use plan::{GpuLayers, SplitMode};

use hearth_model::kv::{KvTables, KvUsage};
use std::ops::Range;

use hearth_model::{
    check_step, forward_steps, Backend, BatchedBackend, Error, Logits, ModelConfig, PlacedPart,
    Result, SeqStep, Stage, StageOutput, Sublayer,
};

/// Stages in the order of their layers, the first embedding tokens and the last ending the
/// model; a row split's devices are consecutive stages holding the same layers.
pub struct Split {
    stages: Vec<Box<dyn Stage>>,
    /// Stages that run layers together: one holding them whole, or a row split's devices.
    groups: Vec<Range<usize>>,
}

impl Split {
    /// `stages` must hold the model's layers in order, each starting where the one before
    /// ended (a row split's shares of the same layers together, first to last), over caches
    /// of the same pool and rows.
    pub fn new(stages: Vec<Box<dyn Stage>>) -> Result<Self> {
        let Some(first) = stages.first() else {
            return Err(Error::options(
                "layers",
                "a split model needs at least one part",
            ));
        };
        let n_layer = first.part().n_layer;
        let shape = first.kv().shape();
        let mut next = 0;
        let mut groups = Vec::new();
        let mut i = 0;
        while i < stages.len() {
            let part = stages[i].part();
            if part.layers.start != next || part.n_layer != n_layer {
                return Err(Error::options(
                    "layers",
                    format!(
                        "parts must follow one another: layers {}..{} after {next}",
                        part.layers.start, part.layers.end
                    ),
                ));
            }
            let count = part.shard.as_ref().map_or(1, |s| s.count);
            let group = i..i + count;
            let shares_ok = stages.len() >= group.end
                && stages[group.clone()].iter().enumerate().all(|(k, s)| {
                    let p = s.part();
                    let shard = p.shard.as_ref();
                    p.layers == part.layers
                        && shard.map_or(count == 1, |sh| sh.index == k && sh.count == count)
                });
            if !shares_ok {
                return Err(Error::options(
                    "split",
                    format!(
                        "layers {}..{}: a row split's {count} shares must follow one another",
                        part.layers.start, part.layers.end
                    ),
                ));
            }
            for s in &stages[group.clone()] {
                let other = s.kv().shape();
                if (other.blocks, other.rows, other.n_ctx)
                    != (shape.blocks, shape.rows, shape.n_ctx)
                {
                    return Err(Error::options(
                        "kv_budget",
                        "every part's cache needs the same blocks and rows",
                    ));
                }
            }
            next = part.layers.end;
            i = group.end;
            groups.push(group);
        }
        if next != n_layer {
            return Err(Error::options(
                "layers",
                format!("the parts hold {next} of the model's {n_layer} layers"),
            ));
        }
        Ok(Self { stages, groups })
    }

    /// The first stage, whose block tables every other follows.
    fn leader(&self) -> &dyn Stage {
        self.stages[0].as_ref()
    }

    /// Runs one step through every stage.
    fn step(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>> {
        let (leader, rest) = self.stages.split_first_mut().expect("at least one stage");
        for s in rest.iter_mut() {
            s.kv_mut().follow(leader.kv());
        }
        let rows = leader.kv().shape().rows;
        // Rows past the cache are the first stage's error to report.
        let lens: Vec<(usize, usize)> = seqs
            .iter()
            .filter(|s| s.row < rows)
            .map(|s| (s.row, leader.kv().len(s.row)))
            .collect();
        let mut hidden: Option<Vec<f32>> = None;
        let count = self.groups.len();
        for i in 0..count {
            let group = self.groups[i].clone();
            let out = match group.len() {
                1 => self.stages[group.start].step_stage(seqs, hidden.as_deref()),
                _ => step_rows(&mut self.stages[group], seqs, hidden.take()),
            };
            match out {
                Ok(StageOutput::Hidden(h)) if i + 1 < count => hidden = Some(h),
                Ok(StageOutput::Logits(logits)) if i + 1 == count => return Ok(logits),
                Ok(_) => unreachable!("Split::new checked that only the last part ends the model"),
                Err(e) => {
                    // The parts before this one appended the step's positions: take them
                    // back, so the rows stand where they stood (the others follow).
                    if i > 0 {
                        let kv = self.stages[0].kv_mut();
                        for &(row, len) in &lens {
                            kv.truncate(row, len);
                        }
                    }
                    return Err(e);
                }
            }
        }
        unreachable!("the last part returns logits")
    }
}

/// One step of layers divided by rows among `shares`' devices: the first embeds (where the
/// layers start the model), every layer's attention and MLP run on all of them at once and
/// their partial sums are added to the residual stream here, and the first computes the
/// logits (where the layers end the model).
fn step_rows(
    shares: &mut [Box<dyn Stage>],
    seqs: &[SeqStep],
    hidden: Option<Vec<f32>>,
) -> Result<StageOutput> {
    let mut begun = 0;
    let out = run_rows(shares, seqs, hidden, &mut begun);
    for s in &mut shares[..begun] {
        s.end_rows(out.is_ok());
    }
    out
}

fn run_rows(
    shares: &mut [Box<dyn Stage>],
    seqs: &[SeqStep],
    hidden: Option<Vec<f32>>,
    begun: &mut usize,
) -> Result<StageOutput> {
    for s in shares.iter_mut() {
        s.begin_rows(seqs)?;
        *begun += 1;
    }
    let part = shares[0].part().clone();
    let mut x = match hidden {
        Some(h) => h,
        None => hidden_of(shares[0].step_rows(seqs, Sublayer::Embed, None)?)?,
    };
    for l in part.layers.clone() {
        for sub in [Sublayer::Attention(l), Sublayer::Mlp(l)] {
            let partials = on_each(shares, |s| s.step_rows(seqs, sub, Some(&x)))?;
            for p in partials {
                if p.len() != x.len() {
                    return Err(Error::options(
                        "hidden",
                        format!("a partial sum of {} values for {}", p.len(), x.len()),
                    ));
                }
                for (xi, pi) in x.iter_mut().zip(p) {
                    *xi += pi;
                }
            }
        }
    }
    match part.heads() {
        true => shares[0].step_rows(seqs, Sublayer::Head, Some(&x)),
        false => Ok(StageOutput::Hidden(x)),
    }
}

/// `f` on every stage at once (each device on a thread of its own), their hidden outputs in
/// the stages' order.
fn on_each(
    stages: &mut [Box<dyn Stage>],
    f: impl Fn(&mut dyn Stage) -> Result<StageOutput> + Sync,
) -> Result<Vec<Vec<f32>>> {
    let (first, rest) = stages.split_first_mut().expect("a row split has devices");
    let f = &f;
    let outs: Vec<Result<StageOutput>> = std::thread::scope(|scope| {
        let others: Vec<_> = rest
            .iter_mut()
            .map(|s| scope.spawn(move || f(s.as_mut())))
            .collect();
        let mut outs = vec![f(first.as_mut())];
        for h in others {
            outs.push(
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        outs
    });
    outs.into_iter().map(|o| hidden_of(o?)).collect()
}

fn hidden_of(out: StageOutput) -> Result<Vec<f32>> {
    match out {
        StageOutput::Hidden(h) => Ok(h),
        StageOutput::Logits(_) => Err(Error::options(
            "split",
            "a row split's piece returned logits where the residual stream was due",
        )),
    }
}

impl Backend for Split {
    fn config(&self) -> &ModelConfig {
        self.leader().config()
    }

    fn n_ctx(&self) -> usize {
        self.leader().kv().shape().n_ctx
    }

    fn len(&self) -> usize {
        self.leader().kv().len(0)
    }

    fn truncate(&mut self, len: usize) {
        self.stages[0].kv_mut().truncate(0, len);
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        check_step(self.config(), tokens, self.len(), self.n_ctx())?;
        let chunk = self.max_step_tokens();
        let mut out = Vec::new();
        for (step, _) in forward_steps(tokens, chunk, logits) {
            out.extend(self.step(&[step])?.remove(0));
        }
        Ok(out)
    }

    /// What each stage holds and how long its steps took.
    fn placement(&self) -> Vec<PlacedPart> {
        self.stages.iter().map(|s| s.placed()).collect()
    }

    fn as_batched_mut(&mut self) -> Option<&mut dyn BatchedBackend> {
        Some(self)
    }

    fn as_batched(&self) -> Option<&dyn BatchedBackend> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn set_kv_policy(&mut self, choice: hearth_model::kv::policy::KvPolicyChoice) -> Result<()> {
        use hearth_model::kv::policy::KvPolicyChoice;
        match choice {
            KvPolicyChoice::Dense => Ok(()),
            other => Err(Error::options(
                "kv-offload",
                format!(
                    "{} needs every layer on one executor; this model is split between {}",
                    other.kind(),
                    self.stages.len()
                ),
            )),
        }
    }
}

impl BatchedBackend for Split {
    fn kv(&self) -> &KvTables {
        self.leader().kv()
    }

    fn kv_mut(&mut self) -> &mut KvTables {
        self.stages[0].kv_mut()
    }

    fn kv_usage(&self) -> KvUsage {
        // The blocks are the first part's; every part keeps its own layers' K and V in them.
        KvUsage {
            bytes: self
                .stages
                .iter()
                .map(|s| s.kv().shape().total_bytes())
                .sum(),
            ..self.leader().kv().usage()
        }
    }

    fn fork(&mut self, src: usize, dst: usize, len: usize) {
        self.stages[0].fork(src, dst, len);
    }

    fn max_step_tokens(&self) -> usize {
        self.stages
            .iter()
            .map(|s| s.max_step_tokens())
            .min()
            .unwrap_or(1)
    }

    fn step_batch(&mut self, seqs: &[SeqStep]) -> Result<Vec<Vec<f32>>> {
        self.step(seqs)
    }

    fn set_beams(&self, row: usize, beams: &[u32]) -> Result<u32> {
        let mut offset = None;
        for s in &self.stages {
            let o = s.set_beams(row, beams)?;
            if offset.is_some_and(|first| first != o) {
                return Err(Error::options(
                    "beams",
                    "the parts number beam tables apart",
                ));
            }
            offset = Some(o);
        }
        Ok(offset.unwrap_or(0))
    }
}
