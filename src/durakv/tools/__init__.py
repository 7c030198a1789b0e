"""Tools that ship with durakv but are not part of the server: `durakv bench` (load generator and compare runner),
the pure parts of `durakv verify` (history, checkers, reports) and pngplot (PNG charts without dependencies)."""
