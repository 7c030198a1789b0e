"""RESP2/RESP3 protocol: sans-IO parsing (bytes in, commands out) and reply encoding."""
