"""kiln's Python side: the worker processes that a kiln host starts and drives.

A worker speaks the runtime control protocol v1 (``kiln.wire``) on a private Unix socket.
"""
