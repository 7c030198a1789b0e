"""RESP2/RESP3 protocol: sans-IO parsing (bytes in, commands out) and reply encoding, plus the two clients.

Where each job is done, once:
- requests in: parser.py's RequestParser (the exact transcription of networking.c, inline included, with a
  hiredis path it proves; the compiled core's parser keeps the same rules);
- commands out: resp.encode_command / extend_command (clients, the journal's entries, the replication feed);
- replies and journal effects read back: hiredis.Reader;
- replies out: resp.py's encoders (RESP2 and RESP3);
- integers: numbers.py (string2ll and its kin from intstring.py);
- clients: client.py, blocking (tools, the control plane, threads); aclient.py, asyncio (node-to-node links
  on a server's loop). aclient.py's docstring says which readers keep their own bytes, and why.
"""
