//! A test's own log lines: a `tracing` subscriber writes them into a
//! buffer the test reads back, to check what was said (once, at the right
//! level) and what never is (a secret). The subscriber gets a clone
//! (`.with_writer(logs.clone())`); the test reads [`LogBuffer::text`].

use std::sync::{Arc, Mutex};
use tracing_subscriber::fmt::MakeWriter;

/// Every line written through any of its clones, in one buffer.
#[derive(Clone, Debug, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
