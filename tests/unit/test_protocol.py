"""The messages between the supervisor, its fork server and a job's child
(sandbox/protocol.py): each kind encodes to the JSON the protocol's docstring shows and
decodes back to itself; a reader of another poolsup version's messages leaves out the
fields it does not know and skips the kinds it does not know, and a message without a
field it needs is an error."""

from __future__ import annotations

import orjson
import pytest

from sandbox import protocol
from supervisor.job.channel import ControlReader

REQUESTS = [
    protocol.Spawn(job="7", handler="h", deadline=12.5),
    protocol.Spawn(job="7", handler="h"),
    protocol.Assign(job="9", pid=11, deadline=12.5),
    protocol.Finished(jobs=["7", "8"]),
    protocol.Fence(jobs=["7", "8"], deadline=3.0),
    protocol.Signal(job="7", signal=15),
    protocol.Kill(job="7"),
    protocol.AskStacks(job="7"),
    protocol.Exit(),
    protocol.Ping(seq=3),
]
EVENTS = [
    protocol.Ready(pid=10, handlers={"h": None, "b": "ImportError"}, sandbox={"h": "x"}),
    protocol.Spawned(job="7", pid=11),
    protocol.SpawnFailed(job="7", error="no"),
    protocol.Pong(seq=3),
    protocol.Exited(job="7", pid=11, code=0, signal=None, fenced=False),
    protocol.Exited(job="7", pid=11, code=None, signal=9, fenced=True, reason="memory",
                    survivors=[12]),
]
MESSAGES = [
    protocol.Start(key="k", payload={"a": 1}, token=4, attempt=2, checkpoint=[1],
                   trace={"traceparent": "00-x"}),
    protocol.Stop(reason="drain"),
    protocol.Notify(payload="n", seq=2),
    protocol.Ack(seq=2),
    protocol.Checkpoint(value={"offset": 3}),
    protocol.Result(stopping=False, value=None),
    protocol.Error(error="ValueError: x", traceback="...", final=True),
    protocol.Snooze(seconds=5.0),
    protocol.EndSchedule(),
    protocol.Spans(spans=[], dropped=1),
    protocol.ThreadStacks(threads=[{"thread": "main"}]),
    protocol.Done(),
]


@pytest.mark.parametrize("request_", REQUESTS)
def test_a_request_decodes_to_itself(request_: protocol.Request) -> None:
    assert protocol.decode_request(protocol.encode(request_)) == request_


@pytest.mark.parametrize("event", EVENTS)
def test_an_event_decodes_to_itself(event: protocol.Event) -> None:
    assert protocol.decode_event(protocol.encode(event)) == event


@pytest.mark.parametrize("message", MESSAGES)
def test_a_message_decodes_to_itself(message: protocol.Message) -> None:
    line = protocol.encode_line(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.decode_message(line[:-1]) == message


def test_a_packet_of_several_requests_decodes_to_them_in_order() -> None:
    requests = [protocol.Finished(jobs=["7"]), protocol.Assign(job="9", pid=11, deadline=1.0)]
    packet = protocol.encode_requests(requests)
    assert protocol.decode_requests(packet) == requests
    assert protocol.decode_requests(protocol.encode(REQUESTS[0])) == [REQUESTS[0]]


def test_the_wire_is_the_documented_json() -> None:
    assert orjson.loads(protocol.encode(protocol.Fence(jobs=["7"], deadline=3.0))) == {
        "op": "fence", "jobs": ["7"], "deadline": 3.0}
    assert orjson.loads(protocol.encode_line(protocol.Stop(reason="stop"))) == {
        "t": "stop", "reason": "stop"}
    assert orjson.loads(protocol.encode(protocol.Assign(job="9", pid=11, deadline=2.0))) == {
        "op": "assign", "job": "9", "pid": 11, "deadline": 2.0}
    assert orjson.loads(protocol.encode(protocol.Finished(jobs=["7"]))) == {
        "op": "finished", "jobs": ["7"]}
    assert protocol.encode_line(protocol.Done()) == b'{"t":"done"}\n'


def test_the_result_and_checkpoint_lines_are_messages_too() -> None:
    line = protocol.result_line(b'{"n":1}', stopping=True)
    assert protocol.decode_message(line[:-1]) == protocol.Result(stopping=True,
                                                                 value={"n": 1})
    assert protocol.read_result_line(line[:-1]) == (b'{"n":1}', True)
    assert protocol.read_result_line(b'{"t":"ack","seq":1}') is None
    line = protocol.checkpoint_line(b"[1,2]")
    assert protocol.decode_message(line[:-1]) == protocol.Checkpoint(value=[1, 2])


def test_a_field_this_side_does_not_know_is_left_out() -> None:
    assert protocol.decode_event(
        b'{"ev":"spawned","job":"7","pid":11,"since":3}') == protocol.Spawned(job="7", pid=11)


def test_a_kind_this_side_does_not_know_is_an_unknown_message() -> None:
    for decode in (protocol.decode_request, protocol.decode_event, protocol.decode_message):
        with pytest.raises(protocol.UnknownMessage):
            decode(b'{"op":"later","ev":"later","t":"later"}')


@pytest.mark.parametrize("data", [b'{"ev":"spawned","job":"7"}', b"[1]", b"{"])
def test_a_message_without_a_field_it_needs_or_not_an_object_is_an_error(
    data: bytes,
) -> None:
    with pytest.raises(ValueError) as raised:
        protocol.decode_event(data)
    assert not isinstance(raised.value, protocol.UnknownMessage)


def test_the_supervisor_skips_a_kind_of_message_it_does_not_know() -> None:
    reader = ControlReader(max_result=1000)
    reader.feed(b'{"t":"later","x":1}\n{"t":"result","stopping":false,"value":5}\n')
    ended = reader.exit_report(None)
    assert (ended.protocol_error, reader.result_json) == (None, b"5")


def test_a_line_from_the_child_that_is_not_a_message_is_a_protocol_error() -> None:
    reader = ControlReader(max_result=1000)
    reader.feed(b'{"t":"ack"}\n')  # as before it was typed: an ack it cannot use is ignored
    assert reader.exit_report(None).protocol_error is None
    reader.feed(b"not json\n")
    assert reader.exit_report(None).protocol_error is not None
