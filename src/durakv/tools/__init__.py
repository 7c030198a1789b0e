"""Tools that ship with durakv but are not part of the server: `durakv bench` (load generator and compare runner)."""
