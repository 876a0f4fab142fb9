//! weft's web UI in headless Chromium: one test binary (see docs/dev/testing.md) with the admin
//! and user flows (`browser`), hostile input planted everywhere a user can write and every page
//! opened by every role (`hostile`), and structured forms saved unchanged (`roundtrip`).

mod browser;
mod common;
mod hostile;
mod roundtrip;
