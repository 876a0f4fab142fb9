//! weft-store.
