#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 that is free now, for a rendezvous (MASTER_PORT).

The port comes from below the kernel's ephemeral range (net.ipv4.ip_local_port_range). A port the kernel hands out
for bind(0) lies inside that range, where any process's outgoing connection (another run's Gloo or store client) may
take it as its source port between this check and the trainer's listen(): the suite saw rank 0 fail with EADDRINUSE
that way while its peer waited out the rendezvous timeout. Below the range only another listener can take it.
"""
import random
import socket


def free_port() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    lo, hi = (10000, low) if low > 12000 else (low // 2, low)  # a host whose range starts low: its lower half
    for _ in range(200):
        port = random.randrange(lo, hi)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # everything tried was taken: fall back to the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    print(free_port())
