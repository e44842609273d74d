//! Serving the loaded model over OpenAI's API, beside the app's own chats: editors and
//! agents on this machine can then use the model the app has loaded.

use std::net::SocketAddr;

use super::{App, ModelState};

/// Default port of the app's server, as `hearth serve`'s.
pub const DEFAULT_PORT: u16 = 8080;

/// Where the server stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    Off,
    Starting,
    On(SocketAddr),
}

impl Serving {
    /// The base URL clients are given (`http://127.0.0.1:8080/v1`).
    pub fn base_url(&self) -> Option<String> {
        match self {
            Serving::On(a) => Some(format!("http://{a}/v1")),
            _ => None,
        }
    }
}

impl App {
    /// Starts the server for the loaded model on loopback, or stops it.
    pub fn toggle_serving(&mut self) {
        match self.serving {
            Serving::On(_) => {
                self.worker().stop_serving();
                self.serving = Serving::Starting;
            }
            Serving::Starting => {}
            Serving::Off => {
                if !matches!(self.model, ModelState::Ready { .. }) {
                    return;
                }
                let port = self.prefs.serve_port.unwrap_or(DEFAULT_PORT);
                self.worker().serve(format!("127.0.0.1:{port}"));
                self.serving = Serving::Starting;
            }
        }
    }
}
