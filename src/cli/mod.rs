//! Command-line work beyond serving: replaying scripts, the demo.
//!
//! These sit beside the protocol front doors and use the engine the same
//! way; argument parsing itself is in `main.rs`.

pub mod demo;
pub mod replay;
