//! What the tests of every Jadpo crate share. It depends on no other Jadpo
//! crate, so any crate's tests (and `jadpo-store`'s `testing` feature) may
//! use it.

pub mod skip;
