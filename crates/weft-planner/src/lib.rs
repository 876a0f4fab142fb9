//! weft-planner (stub; see its issue).
