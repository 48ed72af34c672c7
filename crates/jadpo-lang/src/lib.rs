//! The app file language (issue 3).
