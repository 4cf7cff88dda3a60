//! The control protocol between the two sides of a test.
//!
//! - [`wire`]: the versioned, length-framed message codec of the TCP
//!   control connection, and the pair protocol's messages.
//! - [`session`]: the session's rules as two deterministic state machines
//!   (client and server): what to send, what to wait for and how long,
//!   the hello checks and negotiation, the walk over the sizes.

pub mod session;
pub mod wire;
