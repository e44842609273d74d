//! `hearth chat`: an interactive conversation in the terminal, rendered with the model's chat
//! template. Answers stream as they are generated; Ctrl-C stops the current answer and keeps
//! the conversation; Ctrl-C at the prompt, Ctrl-D or `/exit` leaves.
//!
//! Each answer is a request to the engine's service, as `hearth serve`'s are; the scheduler's
//! prefix cache keeps the conversation so far, so a turn computes only its new tokens.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Result;
use hearth_engine::chat_prompt;
use hearth_engine::sched::RequestParams;
use hearth_engine::service::{Event, Handle, Service, ServiceOptions};
use hearth_engine::session::{FinishReason, GenerateParams};
use hearth_models::ChatMessage;

use crate::draft_args::DraftArgs;
use crate::grammar_args::GrammarArgs;
use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;
use crate::DeviceChoice;

#[derive(clap::Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// System prompt.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer (-1: until the model ends its turn or the context is full).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Context length [default: the model's, at most 4096].
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    draft: DraftArgs,
    #[command(flatten)]
    grammar: GrammarArgs,
}

const HELP: &str = "commands: /reset starts a new conversation, /exit leaves; \
                    Ctrl-C stops an answer";

pub fn run(args: &ChatArgs, device: &DeviceChoice) -> Result<()> {
    let speculative = args.draft.speculative()?;
    let grammar = args.grammar.spec()?;
    let mut engine = args.model.load(device, args.ctx_size)?;
    args.draft.load(&mut engine, &args.model.run, device)?;
    let info = engine.info().clone();
    let n_ctx = engine.session().backend().n_ctx();
    let (tokenizer, template) = engine.text_tools();
    let (service, handle) = Service::spawn(engine, ServiceOptions { parallel: 1 })?;
    eprintln!(
        "{} on {} ({n_ctx} tokens of context). {HELP}",
        info.name, info.device
    );

    let generating = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (generating, interrupted) = (generating.clone(), interrupted.clone());
        ctrlc::set_handler(move || {
            if generating.load(Ordering::SeqCst) {
                interrupted.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                std::process::exit(0);
            }
        })?;
    }

    let system: Vec<ChatMessage> = args
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s.as_str()))
        .collect();
    let mut messages = system.clone();
    let mut params = GenerateParams {
        max_tokens: usize::try_from(args.n_predict).ok(),
        sampler: args.sampling.params(),
        speculative,
        grammar,
        ..GenerateParams::default()
    };
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            break;
        }
        let line = line.trim_end_matches(['\n', '\r']);
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages = system.clone();
                eprintln!("(new conversation)");
                continue;
            }
            "/help" => {
                eprintln!("{HELP}");
                continue;
            }
            _ => {}
        }
        messages.push(ChatMessage::new("user", line));
        let prompt = chat_prompt(&tokenizer, &template, &messages)?;
        // A whole answer must fit after the prompt; without a limit, what remains of it.
        if prompt.len() >= n_ctx {
            messages.pop();
            eprintln!("error: the conversation no longer fits the context; /reset to start over");
            continue;
        }
        if args.n_predict < 0 {
            params.max_tokens = Some(n_ctx - prompt.len());
        }
        interrupted.store(false, Ordering::SeqCst);
        generating.store(true, Ordering::SeqCst);
        let result = answer(&handle, prompt, &params, &interrupted);
        generating.store(false, Ordering::SeqCst);
        println!();
        match result {
            Ok((text, finish)) => {
                if finish == FinishReason::Cancelled {
                    eprintln!("(stopped)");
                }
                messages.push(ChatMessage::new("assistant", text.trim()));
                // Sampling continues from where it stopped rather than repeating itself.
                params.sampler.seed = params.sampler.seed.wrapping_add(1);
            }
            Err(e) => {
                messages.pop();
                eprintln!("error: {e}");
            }
        }
    }
    drop(handle);
    service.join();
    Ok(())
}

/// Streams one answer to stdout; `interrupted` stops it. Returns its text and how it ended.
fn answer(
    handle: &Handle,
    prompt: Vec<u32>,
    params: &GenerateParams,
    interrupted: &AtomicBool,
) -> Result<(String, FinishReason), String> {
    let (tx, rx) = mpsc::channel();
    let request = RequestParams {
        generate: params.clone(),
        n: 1,
    };
    let sink = Box::new(move |event| tx.send(event).is_ok());
    let id = handle
        .submit_wait(prompt, request, sink)
        .map_err(|e| e.to_string())?;
    let mut stdout = std::io::stdout();
    let mut text = String::new();
    let mut cancelled = false;
    loop {
        if interrupted.load(Ordering::SeqCst) && !cancelled {
            handle.cancel(id);
            cancelled = true;
        }
        let event = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(event) => event,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err("the engine stopped".into()),
        };
        match event {
            Event::Token(e) => {
                let _ = stdout
                    .write_all(e.text.as_bytes())
                    .and_then(|_| stdout.flush());
                text.push_str(&e.text);
                if let Some(finish) = e.finish {
                    return Ok((text, finish));
                }
            }
            Event::Report(_) => {}
            Event::Failed(e) => return Err(e.to_string()),
        }
    }
}
