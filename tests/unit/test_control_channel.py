"""A job's end of its control socket (sandbox/channel.py) once the supervisor is gone: a
checkpoint that cannot be sent is lost like any save at a crash, and the handler is not
failed for it (found by the 30-minute --overlap chaos run: a long job's run ended by
'raise' when its supervisor was SIGKILLed during a save)."""

from __future__ import annotations

import socket

from sandbox.channel import ControlChannel


def test_a_checkpoint_saved_after_the_supervisor_is_gone_does_not_raise() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    channel = ControlChannel(ours.detach())
    theirs.close()

    for _ in range(3):  # the first send may still be taken by the kernel
        channel.save_checkpoint(b'{"count": 5}')
    channel.acknowledge(1)
    channel.sock.close()
