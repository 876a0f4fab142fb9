//! weft-ui-tests: browser tests of the web UI (in `tests/`), run in headless Chromium through
//! Debian's `chromium-driver`. Not shipped; the library is empty.
