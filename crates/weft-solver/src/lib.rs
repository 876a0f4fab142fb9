//! weft-solver (stub; see its issue).
