"""A job's end of its control socket: newline-delimited JSON both ways (see
`sandbox.protocol`)."""

from __future__ import annotations

import contextlib
import socket
import threading

from sandbox import protocol

_RECV_SIZE = 65536


class ControlChannel:
    """The job's end of its control socket: newline-delimited JSON both ways.

    The main thread, the handler's threads and the reader thread may all send: each
    line goes out whole, under a lock.
    """

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
        self._buffer = b""
        self._send_lock = threading.Lock()
        # A reused child's job's last message (its result, error, snooze) waits for what
        # follows it, `done` or `retired`: one write, one wake-up of the supervisor,
        # which ends the job only at "done" anyway.
        self.holds_last = False
        self._held = b""

    def read_message(self) -> protocol.Message | None:
        """The next message, or None at end of stream."""
        while (message := self.buffered_message()) is None:
            if not self.feed():
                return None
        return message

    def buffered_message(self) -> protocol.Message | None:
        """A message already received, without reading the socket; raises ValueError
        for a line that is not one."""
        if b"\n" not in self._buffer:
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return protocol.decode_message(line)

    def feed(self) -> bool:
        """Read what the socket has into the buffer; False at end of stream."""
        try:
            data = self.sock.recv(_RECV_SIZE)
        except ConnectionError:
            return False
        self._buffer += data
        return bool(data)

    def send(self, message: protocol.Message) -> None:
        self.send_raw_line(protocol.encode_line(message))

    def send_raw_line(self, line: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(line)

    def send_last(self, line: bytes) -> None:
        """The job's last message: held if `holds_last`, else sent now."""
        if self.holds_last:
            self._held = line
        else:
            self.send_raw_line(line)

    def send_held(self, after: protocol.Message | None = None) -> None:
        """The job's last message held, if one is, then `after`, in one write."""
        line = self._held + (b"" if after is None else protocol.encode_line(after))
        self._held = b""
        if line:
            self.send_raw_line(line)

    def save_checkpoint(self, value_json: bytes) -> None:
        """Send a checkpoint (JSON text) for the supervisor to store under the lease; if
        it is gone, the save is lost as at any crash, and the stop that follows (the
        fork server's, at the fence) ends the job."""
        with contextlib.suppress(OSError):
            self.send_raw_line(protocol.checkpoint_line(value_json))

    def acknowledge(self, seq: int) -> None:
        """Tell the supervisor the handler took note `seq`; if it is gone, the stop
        that follows says so."""
        with contextlib.suppress(OSError):
            self.send(protocol.Ack(seq=seq))
