//! The control protocol between the two sides of a test.
//!
//! - [`wire`]: the versioned, length-framed message codec of the TCP
//!   control connection.

pub mod wire;
