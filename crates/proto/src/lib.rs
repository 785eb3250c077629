//! Baton's client protocol codec.
