//! proto

pub mod wire;
