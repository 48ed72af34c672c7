//! One module per subcommand.

pub mod check;
pub mod dev;
pub mod serve;
