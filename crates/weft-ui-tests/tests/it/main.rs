//! weft's web UI in headless Chromium: one test binary (see docs/dev/testing.md) with the admin
//! and user flows (`browser`), hostile input planted everywhere a user can write and every page
//! opened by every role (`hostile`), structured forms saved unchanged (`roundtrip`), and one
//! cluster page kept open through create, a health run, expand and replace-node (`live`).
// The tests start servers, containers and tools by design (clippy.toml's disallowed methods).
#![allow(clippy::disallowed_methods)]
// A test reads as one scenario; short functions (docs/dev/style.md) are for the crates' code.
#![allow(clippy::too_many_lines)]

mod browser;
mod common;
mod hostile;
mod live;
mod roundtrip;
