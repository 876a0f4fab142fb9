//! The `joyent` provider (Triton CloudAPI).
