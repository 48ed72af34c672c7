//! The runtime (issue 5).
