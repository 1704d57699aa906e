"""The TCP port a server is given, picked below the host's ephemeral range.

The kernel hands ports of the ephemeral range to every outgoing connection (the kit's own health polls among
them) and to every `bind(0)`, so a port it called free could be some client's source port by the time the server
binds it seconds later (a simulated server failed to bind once in CI that way). Below the range only another
listener can take it. Stdlib only, and self-contained: a remote host runs this module's source as it is
(commands.free_port).
"""

import random
import socket


def pick() -> int:
    """A port free on 127.0.0.1 right now, below the ephemeral range where one is; the kernel's choice otherwise."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default start; elsewhere the range is unknown
    candidates = random.sample(range(10000, low), min(50, max(low - 10000, 0)))
    for port in [*candidates, 0]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # a listener has it
            return sock.getsockname()[1]
    raise OSError("no TCP port could be bound on 127.0.0.1")
