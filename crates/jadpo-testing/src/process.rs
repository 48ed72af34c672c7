//! A child process (a `jadpo dev` or `serve`, chromedriver) whose stderr is
//! kept line by line as it comes, so a test can wait for a log line, read
//! the port the process chose, and show every line when it fails.
//!
//! Ports: a test never picks a "free" port by binding one and letting it
//! go (another test may take it before the child binds it). It starts the
//! child on port 0 and reads the port from its log ([`Logged::port`]).

use crate::wait::CEILING;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// A running child with its stderr kept. Killed when dropped, so a failing
/// test leaves no process behind.
pub struct Logged {
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl Logged {
    /// Spawns `command` with its stderr piped (and kept) and its stdout
    /// discarded unless the command set it.
    pub fn spawn(command: &mut Command) -> Logged {
        let mut child = command
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let stderr = child.stderr.take().expect("stderr is piped");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        Logged {
            child: Some(child),
            lines,
            reader: Some(reader),
        }
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every line so far, as one text (for a failure's message).
    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// Until `check` holds over the lines so far; panics with every line if
    /// the process exits first or after [`CEILING`].
    pub fn wait_for(&mut self, what: &str, check: impl Fn(&[String]) -> bool) {
        let start = Instant::now();
        loop {
            if check(&self.lines()) {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.join_reader();
                if check(&self.lines()) {
                    return;
                }
                panic!("exited with {status} while waiting for {what}:\n{}", self.text());
            }
            assert!(
                start.elapsed() < CEILING,
                "timed out after {CEILING:?} waiting for {what}:\n{}",
                self.text()
            );
            std::thread::sleep(crate::wait::POLL);
        }
    }

    /// The port of the first line holding `marker` and an address
    /// `127.0.0.1:PORT` (Jadpo's `api.listening`, for one), once it comes.
    pub fn port(&mut self, marker: &str) -> u16 {
        self.wait_for(&format!("a line with {marker} and its port"), |lines| {
            lines.iter().any(|l| l.contains(marker) && port_in(l).is_some())
        });
        self.lines()
            .iter()
            .filter(|l| l.contains(marker))
            .find_map(|l| port_in(l))
            .expect("waited for it")
    }

    /// SIGTERM, then its exit (at most [`CEILING`]) and every line.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let status = self.wait();
        (status, self.text())
    }

    /// Its exit, at most [`CEILING`] from now.
    pub fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        let child = self.child.as_mut().expect("not waited for yet");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                self.join_reader();
                return status;
            }
            assert!(start.elapsed() < CEILING, "did not exit within {CEILING:?}");
            std::thread::sleep(crate::wait::POLL);
        }
    }

    /// SIGKILL, as a crash would: nothing is given back.
    pub fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.join_reader();
    }

    fn join_reader(&mut self) {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The port of the first `127.0.0.1:PORT` (or `[::1]:PORT`, `0.0.0.0:PORT`,
/// `localhost:PORT`, `on port PORT` as chromedriver says it) in `line`;
/// port 0 is none.
pub fn port_in(line: &str) -> Option<u16> {
    ["127.0.0.1:", "[::1]:", "0.0.0.0:", "localhost:", "on port "]
        .iter()
        .find_map(|host| {
            line.match_indices(host).find_map(|(i, _)| {
                let digits: String = line[i + host.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok().filter(|p| *p != 0)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_read_from_both_log_formats() {
        let human = "08:37:52.491 INFO  api.listening addr=127.0.0.1:42283";
        let json = r#"{"event": "api.listening", "addr": "127.0.0.1:36611", "level": "info"}"#;
        assert_eq!(port_in(human), Some(42283));
        assert_eq!(port_in(json), Some(36611));
        assert_eq!(
            port_in("api=http://127.0.0.1:0 then 127.0.0.1:7"),
            Some(7),
            "port 0 is not a port"
        );
        assert_eq!(port_in("Starting ChromeDriver 156.0 on port 0"), None);
        assert_eq!(
            port_in("ChromeDriver was started successfully on port 40087."),
            Some(40087)
        );
        assert_eq!(port_in("no address"), None);
    }

    #[test]
    fn a_child_is_waited_for_by_its_lines_and_terminated() {
        let mut c = Logged::spawn(Command::new("sh").args([
            "-c",
            "echo 'listening on 127.0.0.1:4321' >&2; trap 'echo bye >&2; exit 0' TERM; while :; do sleep 0.05; done",
        ]));
        assert_eq!(c.port("listening"), 4321);
        let (status, text) = c.terminate();
        assert!(status.success(), "{text}");
        assert!(text.ends_with("bye"), "{text}");
    }
}
