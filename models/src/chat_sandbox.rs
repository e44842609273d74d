//! Chat templates rendered in a worker process with capped memory. A template is code that
//! comes with the model file. Its fuel bounds how many instructions it runs and its output
//! is capped, but within that fuel a loop that doubles a string reaches any size: forty turns
//! ask for a terabyte. In this process that would abort the server. In the worker it fails
//! alone: the worker's address space is capped (`setrlimit`), so the allocation fails there,
//! the worker dies, the request gets an error naming the template, and the next render
//! starts a new worker.
//!
//! The worker is this program started again with an argument that makes it serve renders
//! ([`serve_template_worker`](crate::chat::serve_template_worker)): one JSON line in (the template's source and its variables), one JSON
//! line out (the prompt, or the template's error). The server sets it up ([`confine`]);
//! elsewhere, and on systems without `setrlimit`, templates render in the process.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The worker's address space: room for long conversations and their prompt (the output
/// is capped at 64 MiB), far from what a machine running a model can spare.
pub const WORKER_MEMORY: u64 = 1 << 30;

static SANDBOX: OnceLock<Sandbox> = OnceLock::new();

/// Renders every chat template that came with a model in a worker started as `program
/// args`, from now on in this process. Only the first call takes effect.
pub fn confine(program: PathBuf, args: Vec<String>) {
    let _ = SANDBOX.set(Sandbox {
        program,
        args,
        worker: Mutex::new(None),
    });
}

/// The sandbox, where one was set up.
pub(crate) fn installed() -> Option<&'static Sandbox> {
    SANDBOX.get()
}

/// Where templates render, and the worker now running.
pub struct Sandbox {
    program: PathBuf,
    args: Vec<String>,
    worker: Mutex<Option<Worker>>,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// A render as the server sends it.
#[derive(Serialize)]
struct Request<'a, C> {
    source: &'a str,
    context: C,
}

/// The same as the worker reads it.
#[derive(Deserialize)]
struct Incoming {
    source: String,
    context: serde_json::Value,
}

#[derive(Serialize, Deserialize)]
enum Reply {
    Prompt(String),
    Failed {
        line: Option<usize>,
        message: String,
    },
}

impl Sandbox {
    /// `source` rendered with `context` in the worker; one render at a time.
    pub(crate) fn render(&self, source: &str, context: &impl Serialize) -> Result<String> {
        let line =
            serde_json::to_string(&Request { source, context }).map_err(|e| Error::Template {
                line: None,
                message: format!("the conversation could not be sent to the template: {e}"),
            })?;
        let mut slot = self.worker.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(self.start()?);
        }
        let worker = slot.as_mut().expect("started above");
        match worker.ask(&line) {
            Some(Reply::Prompt(prompt)) => Ok(prompt),
            Some(Reply::Failed { line, message }) => Err(Error::Template { line, message }),
            None => {
                // It died: out of memory, most likely. The next render starts another.
                let mut dead = slot.take().expect("asked above");
                let _ = dead.child.kill();
                let status = dead.child.wait().ok();
                Err(Error::Template {
                    line: None,
                    message: format!(
                        "rendering this conversation took the template past its {} MiB of \
                         memory (its worker ended{})",
                        WORKER_MEMORY >> 20,
                        status.map(|s| format!(": {s}")).unwrap_or_default()
                    ),
                })
            }
        }
    }

    fn start(&self) -> Result<Worker> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // An allocation that fails prints its size and aborts; that is the expected end.
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Template {
                line: None,
                message: format!(
                    "the template worker ({}) did not start: {e}",
                    self.program.display()
                ),
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(Error::Template {
                line: None,
                message: "the template worker has no pipes".into(),
            });
        };
        Ok(Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }
}

impl Worker {
    /// Sends one request and reads its reply; `None` when the worker is gone.
    fn ask(&mut self, line: &str) -> Option<Reply> {
        self.stdin.write_all(line.as_bytes()).ok()?;
        self.stdin.write_all(b"\n").ok()?;
        self.stdin.flush().ok()?;
        let mut reply = String::new();
        match self.stdout.read_line(&mut reply) {
            Ok(n) if n > 0 => serde_json::from_str(&reply).ok(),
            _ => None,
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(mut w) = self.worker.get_mut().ok().and_then(Option::take) {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

/// The worker's loop: caps this process's memory at [`WORKER_MEMORY`], then renders each
/// request line from stdin with `render` (a template's source and its variables) to a reply
/// line on stdout until stdin closes.
pub(crate) fn serve_worker(
    mut render: impl FnMut(&str, serde_json::Value) -> Result<String>,
) -> std::io::Result<()> {
    cap_memory()?;
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let line = line?;
        let reply = match serde_json::from_str::<Incoming>(&line) {
            Ok(req) => match render(&req.source, req.context) {
                Ok(prompt) => Reply::Prompt(prompt),
                Err(e) => failed(e),
            },
            Err(e) => Reply::Failed {
                line: None,
                message: format!("a request the template worker cannot read: {e}"),
            },
        };
        let text = serde_json::to_string(&reply).map_err(std::io::Error::other)?;
        stdout.write_all(text.as_bytes())?;
        stdout.write_all(b"\n")?;
        stdout.flush()?;
    }
    Ok(())
}

fn failed(e: Error) -> Reply {
    match e {
        Error::Template { line, message } => Reply::Failed { line, message },
        other => Reply::Failed {
            line: None,
            message: other.to_string(),
        },
    }
}

#[cfg(unix)]
fn cap_memory() -> std::io::Result<()> {
    rlimit::setrlimit(rlimit::Resource::AS, WORKER_MEMORY, WORKER_MEMORY)?;
    // A worker that dies of its cap leaves no core file behind.
    rlimit::setrlimit(rlimit::Resource::CORE, 0, 0)
}

#[cfg(not(unix))]
fn cap_memory() -> std::io::Result<()> {
    Err(std::io::Error::other(
        "this system cannot cap a process's memory; templates render in the server",
    ))
}
