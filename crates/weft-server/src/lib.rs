//! weft-server.
