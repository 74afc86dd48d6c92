//! `halli-galli` (being written).
