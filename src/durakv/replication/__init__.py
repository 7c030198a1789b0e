"""Followers: tail the shard's journal, apply committed effects, take over as primary when elected."""
