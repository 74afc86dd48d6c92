//! `cockroach-poker` (being written).
