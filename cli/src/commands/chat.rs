//! `hearth chat`: an interactive conversation in the terminal, rendered with the model's chat
//! template. Answers stream as they are generated; Ctrl-C stops the current answer and keeps
//! the conversation; Ctrl-C at the prompt, Ctrl-D or `/exit` leaves.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
use hearth_models::ChatMessage;
use hearth_runtime::session::{FinishReason, GenerateParams};

use crate::model_args::{ModelArgs, SamplingArgs};
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
}

const HELP: &str = "commands: /reset starts a new conversation, /exit leaves; \
                    Ctrl-C stops an answer";

pub fn run(args: &ChatArgs, device: &DeviceChoice) -> Result<()> {
    let mut engine = args.model.load(device, args.ctx_size)?;
    let info = engine.info();
    eprintln!(
        "{} on {} ({} tokens of context). {HELP}",
        info.name,
        info.device,
        engine.session().backend().n_ctx()
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
        ..GenerateParams::default()
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            return Ok(());
        }
        let line = line.trim_end_matches(['\n', '\r']);
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                messages = system.clone();
                engine.session_mut().clear();
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
        let prompt = engine.tokenize_chat(&messages)?;
        // A whole answer must fit after the prompt; without a limit, what remains of it.
        let n_ctx = engine.session().backend().n_ctx();
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
        let result = engine.generate(&prompt, &params, &mut |text| {
            let _ = stdout
                .write_all(text.as_bytes())
                .and_then(|_| stdout.flush());
            !interrupted.load(Ordering::SeqCst)
        });
        generating.store(false, Ordering::SeqCst);
        println!();
        match result {
            Ok(g) => {
                if g.finish == FinishReason::Cancelled {
                    eprintln!("(stopped)");
                }
                messages.push(ChatMessage::new("assistant", g.text.trim()));
                // Sampling continues from where it stopped rather than repeating itself.
                params.sampler.seed = params.sampler.seed.wrapping_add(1);
            }
            Err(e) => {
                messages.pop();
                eprintln!("error: {e}");
            }
        }
    }
}
