//! Beam search drivers: how the beams' KV caches are kept while `sample::beam_scores`
//! chooses.
//!
//! [`search`] runs on an executor with batched steps (the Vulkan one) over an indirect KV cache (as in oneDNN's beam
//! search): beam i lives in cache row i and writes each new position there; its history is read through a
//! beam table [beam, position] naming the row that held its ancestor at each position. A
//! reorder rewrites these small tables on the host and copies no K/V. The prompt is computed
//! once in row 0 and its whole blocks are shared by every row.
//!
//! [`search_copying`] is the straightforward reference on the CPU executor: each beam has its
//! own copy of the cache, copied from its parent at every reorder.

use hearth_model::kv::BLOCK_TOKENS;
use hearth_model::{Backend, BatchedBackend, Error, Logits, Result, SeqStep};
use hearth_reference::CpuModel;

use crate::sample::beam_scores::{BeamParams, BeamSearch, Hypothesis};

/// Beam search from `prompt` on `model`, whose KV cache needs at least `width` rows.
pub fn search(
    model: &mut dyn BatchedBackend,
    prompt: &[u32],
    params: &BeamParams,
    is_eos: impl Fn(u32) -> bool,
) -> Result<Vec<Hypothesis>> {
    params.validate()?;
    let w = params.width;
    let rows = model.kv().shape().rows;
    if w > rows {
        return Err(Error::options(
            "beams",
            format!("{w} beams need {w} KV cache rows; the cache has {rows}"),
        ));
    }
    check_room(prompt, params, model.kv().shape().n_ctx)?;
    for row in 0..w {
        model.kv_mut().clear(row);
    }
    // The prompt, in row 0.
    let chunk = model.max_step_tokens();
    let mut logits = Vec::new();
    for (i, part) in prompt.chunks(chunk).enumerate() {
        let last = (i + 1) * chunk >= prompt.len();
        let step = SeqStep {
            row: 0,
            tokens: part,
            logits: last.then_some(Logits::Last),
            beam: None,
        };
        logits = model.step_batch(&[step])?.remove(0);
    }
    // Every other row shares the prompt's whole blocks and gets its own block for the rest
    // (never read: the beam tables send those positions to row 0), so rows all stand at the
    // prompt's length.
    let p = prompt.len();
    let shared = p / BLOCK_TOKENS * BLOCK_TOKENS;
    for row in 1..w {
        let kv = model.kv_mut();
        kv.fork(0, row, shared);
        kv.append(row, p - shared)?;
    }

    let mut search = BeamSearch::new(*params);
    // The row that holds each position of each beam's history.
    let mut tables: Vec<Vec<u32>> = vec![vec![0; p]];
    let mut logits = vec![logits];
    while !search.is_done() {
        let choices = search.advance(&logits, &is_eos);
        if search.is_done() || choices.is_empty() {
            break;
        }
        // Beam i now lives in row i: its ancestor's table, then its new position in row i.
        tables = choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut t = tables[c.parent].clone();
                t.push(i as u32);
                t
            })
            .collect();
        let mut bases = Vec::with_capacity(choices.len());
        for (i, t) in tables.iter().enumerate() {
            bases.push(model.set_beams(i, t)?);
        }
        let tokens: Vec<[u32; 1]> = choices.iter().map(|c| [c.token]).collect();
        let steps: Vec<SeqStep> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| SeqStep {
                row: i,
                tokens: t,
                logits: Some(Logits::Last),
                beam: Some(bases[i]),
            })
            .collect();
        logits = model.step_batch(&steps)?;
        // Rows left idle this step (fewer beams than rows) fall behind: keep every row at
        // the same length; those positions are never read.
        let len = tables[0].len();
        for row in choices.len()..w {
            let kv = model.kv_mut();
            let behind = len - kv.len(row);
            kv.append(row, behind)?;
        }
    }
    Ok(search.finish())
}

/// The reference: the same search on the CPU executor, each beam with its own copy of the
/// KV cache, copied from its parent when beams are reordered.
pub fn search_copying(
    model: &mut CpuModel,
    prompt: &[u32],
    params: &BeamParams,
    is_eos: impl Fn(u32) -> bool,
) -> Result<Vec<Hypothesis>> {
    params.validate()?;
    check_room(prompt, params, model.n_ctx())?;
    model.truncate(0);
    let first = model.forward(prompt, Logits::Last)?;
    let mut states = vec![model.kv_state()];
    let mut logits = vec![first];
    let mut search = BeamSearch::new(*params);
    while !search.is_done() {
        let choices = search.advance(&logits, &is_eos);
        if search.is_done() || choices.is_empty() {
            break;
        }
        let parents: Vec<_> = choices.iter().map(|c| states[c.parent].clone()).collect();
        states.clear();
        logits.clear();
        for (c, state) in choices.iter().zip(parents) {
            model.set_kv_state(&state);
            logits.push(model.forward(&[c.token], Logits::Last)?);
            states.push(model.kv_state());
        }
    }
    Ok(search.finish())
}

fn check_room(prompt: &[u32], params: &BeamParams, n_ctx: usize) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::options("prompt", "is empty"));
    }
    if prompt.len() + params.max_tokens > n_ctx {
        return Err(Error::ContextFull {
            needed: prompt.len() + params.max_tokens,
            used: 0,
            n_ctx,
        });
    }
    Ok(())
}
