"""The answer journal: answers of unfinished examples survive a kill and are replayed, once each.

The end-to-end case (a killed pytest run whose resume does not ask again for answers it had
received) is in tests/test_resume.py; here the file format and DirectOpenAI's use of it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest

from pytest_modal_eval.client import answer_journal
from pytest_modal_eval.client.answer_journal import (
    Answer,
    AnswerJournal,
    current_example,
    request_key,
)
from pytest_modal_eval.redact import REDACTED, Redactor
from tests.test_direct_client import BODY, PATH, ScriptedServer, direct, sdk_client
from tests.test_direct_client import Answer as Scripted

CONTENT_TYPE = (b"Content-Type", b"application/json")
COOKIE = (b"Set-Cookie", b"session=s3cr\xe9t")  # not needed to read the body: not stored


def answer(text: str, status: int = 200, *, cookie: bool = True) -> Answer:
    headers = (CONTENT_TYPE, COOKIE) if cookie else (CONTENT_TYPE,)
    return Answer(status, headers, text.encode())


def stored(text: str, status: int = 200) -> Answer:
    """What replaying ``answer(text)`` gives: the body and the headers that decode it."""
    return answer(text, status, cookie=False)


def nothing_finished(example: int) -> bool:
    return False


def test_answers_of_unfinished_examples_are_replayed_once_each_in_order(tmp_path: Path) -> None:
    path = tmp_path / "answers.journal"
    journal = AnswerJournal(path, nothing_finished)
    key = request_key("chat/completions", b'{"q":1}')
    journal.record(1, key, answer("first rollout"))
    journal.record(1, key, answer("second rollout"))  # the same request: another rollout
    journal.record(2, key, answer("example 2"))
    journal.record(None, key, answer("outside any example"))  # not recorded
    journal.close()

    reopened = AnswerJournal(path, lambda example: example == 2)
    assert reopened.replay(1, key) == stored("first rollout")
    assert reopened.replay(1, key) == stored("second rollout")
    assert reopened.replay(1, key) is None  # each answer is handed out once
    assert reopened.replay(2, key) is None  # example 2 is in the checkpoint already
    assert reopened.replay(1, request_key("chat/completions", b'{"q":2}')) is None
    assert reopened.replay(None, key) is None
    assert reopened.replayed == 2
    assert b"s3cr" not in path.read_bytes()
    reopened.close()
    # Not finished yet, so still there for the next resume; a complete run removes the file.
    again = AnswerJournal(path, nothing_finished)
    assert again.replay(1, key) == stored("first rollout")
    again.finished(1)
    again.close()
    assert not path.exists()  # no answer in it is needed any more


def test_a_compressed_answer_is_journaled_decoded_and_replayed_the_same(tmp_path: Path) -> None:
    """The journal holds the body as the client read it (so its text can be redacted), without
    the encoding header; the replayed answer reads the same as the compressed one did."""
    path = tmp_path / "answers.journal"

    async def read(journal: AnswerJournal) -> tuple[bytes, int]:
        server = ScriptedServer([Scripted(gzip=True)])
        url = await server.__aenter__()
        client = direct(sdk_client(url, max_retries=0), journal=journal)
        try:
            current_example.set(4)
            response = await client.post(PATH, body=BODY, cast_to=httpx.Response, options={})
        finally:
            await client.close()
            await server.__aexit__()
        return bytes(response.content), len(server.seen)

    first, sent = asyncio.run(read(AnswerJournal(path, nothing_finished)))
    assert sent == 1 and json.loads(first)["choices"][0]["message"]["content"] == "4"
    assert first in path.read_bytes() and b"gzip" not in path.read_bytes().lower()
    replayed, sent_again = asyncio.run(read(AnswerJournal(path, nothing_finished)))
    assert (replayed, sent_again) == (first, 0)


#: A key with a quote and a backslash: the answer's JSON holds it escaped.
ECHOED = 'sk-"echo\\ed"-MARK'


def _completion(content: str, **extra: object) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    return json.dumps({"id": "c", "choices": [choice], **extra}).encode()


@pytest.mark.parametrize(
    "body",
    [
        _completion(f"the key is {ECHOED}, sent to https://bob:pw-1234567@h/"),
        _completion(f"Grüße ✓ {ECHOED!r}", usage={"prompt_tokens": 3}),
        b"plain text " + ECHOED.encode() + b" \xff",
    ],
    ids=["json", "json-with-a-repr", "not-json"],
)
def test_answers_are_journaled_redacted_as_records_are(tmp_path: Path, body: bytes) -> None:
    """A server that echoes the key in an answer's text: the journal holds it redacted, and
    what is replayed parses to what the run's records hold of the answer itself."""
    redactor = Redactor([ECHOED])
    path = tmp_path / "answers.journal"
    journal = AnswerJournal(path, nothing_finished, redactor)
    journal.record(1, "k", Answer(200, (CONTENT_TYPE,), body))
    journal.record(1, "plain", answer("nothing secret here"))
    journal.close()
    assert b"MARK" not in path.read_bytes() and b"pw-1234567" not in path.read_bytes()
    reopened = AnswerJournal(path, nothing_finished, redactor)
    replayed = reopened.replay(1, "k")
    assert replayed is not None and REDACTED.encode() in replayed.content
    assert reopened.replay(1, "plain") == stored("nothing secret here")  # kept byte for byte
    if body.startswith(b"{"):
        # What the run records of the answer (records are redacted) is what the replay gives.
        recorded = redactor.json(json.loads(body), by_name=False)
        assert json.loads(replayed.content) == recorded
        assert redactor.json(json.loads(replayed.content), by_name=False) == recorded
    else:
        text = body.decode("utf-8", "surrogateescape")
        assert replayed.content == redactor.text(text).encode("utf-8", "surrogateescape")


def test_a_torn_last_record_is_cut_off_and_appending_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "answers.journal"
    journal = AnswerJournal(path, nothing_finished)
    journal.record(1, "k", answer("whole"))
    journal.close()
    intact = path.read_bytes()
    journal = AnswerJournal(path, nothing_finished)
    journal.record(2, "k", answer("torn by a crash"))
    journal.close()
    path.write_bytes(path.read_bytes()[: len(intact) + 30])  # header whole, content cut

    reopened = AnswerJournal(path, nothing_finished)
    assert path.read_bytes() == intact
    assert reopened.replay(2, "k") is None
    reopened.record(3, "k", answer("after the tear"))
    reopened.close()
    last = AnswerJournal(path, nothing_finished)
    assert last.replay(1, "k") == stored("whole")
    assert last.replay(3, "k") == stored("after the tear")


@pytest.mark.parametrize("garbage", [b"not json\n", b'{"length": 5}\nabc', b"\xff\xfe"])
def test_an_unreadable_tail_ends_the_readable_part(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "answers.journal"
    journal = AnswerJournal(path, nothing_finished)
    journal.record(1, "k", answer("kept"))
    journal.close()
    path.write_bytes(path.read_bytes() + garbage)
    assert AnswerJournal(path, nothing_finished).replay(1, "k") == stored("kept")


def test_answers_of_finished_examples_are_dropped_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(answer_journal, "COMPACT_AFTER_BYTES", 2000)
    path = tmp_path / "answers.journal"
    journal = AnswerJournal(path, nothing_finished)
    journal.record(0, "k", answer("still running"))
    sizes = []
    for example in range(1, 200):
        journal.record(example, "k", answer(f"answer {example} " + "x" * 100))
        journal.finished(example)
        sizes.append(path.stat().st_size)
    assert max(sizes) < 2 * 2000 + 500  # rewritten whenever finished answers pile up
    journal.record(500, "k", answer("recorded after a rewrite"))
    journal.close()
    reopened = AnswerJournal(path, nothing_finished)
    assert reopened.replay(0, "k") == stored("still running")
    assert reopened.replay(500, "k") == stored("recorded after a rewrite")
    assert reopened.replay(150, "k") is None


def test_direct_client_records_answers_and_replays_them_without_sending(tmp_path: Path) -> None:
    path = tmp_path / "answers.journal"

    async def rollouts(journal: AnswerJournal) -> tuple[list[bytes], int]:
        server = ScriptedServer([Scripted()])
        url = await server.__aenter__()
        client = direct(sdk_client(url, max_retries=0), journal=journal)

        async def rollout(example: int) -> bytes:
            current_example.set(example)  # as the adapter's worker sets it
            response = await client.post(PATH, body=BODY, cast_to=httpx.Response, options={})
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/json")
            return bytes(response.content)

        try:
            contents = list(await asyncio.gather(rollout(7), rollout(7), rollout(8)))
        finally:
            await client.close()
            await server.__aexit__()
        return contents, len(server.seen)

    first, sent = asyncio.run(rollouts(AnswerJournal(path, nothing_finished)))
    assert sent == 3
    # Killed before any example was checkpointed; example 8 made it in the end.
    replayed, sent_again = asyncio.run(rollouts(AnswerJournal(path, lambda e: e == 8)))
    assert sent_again == 1  # example 8's request only
    assert replayed == first


def test_a_full_disk_cuts_the_torn_record_and_stops_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "answers.journal"
    journal = AnswerJournal(path, nothing_finished)
    journal.record(1, "k", answer("before the disk filled up"))
    size = path.stat().st_size
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 20:
            real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    journal.record(2, "k", answer("lost"))  # no exception: the answer still reaches the caller
    journal.record(3, "k", answer("not even tried"))
    monkeypatch.setattr(os, "write", real_write)
    journal.finished(1)
    journal.close()
    assert "No space left on device" in caplog.text
    assert journal.problem is not None and "No space left on device" in journal.problem
    assert path.stat().st_size == size  # the half record was cut off
    kept = AnswerJournal(path, nothing_finished)
    assert kept.replay(1, "k") == stored("before the disk filled up")
    assert kept.replay(2, "k") is None


def test_an_unusable_journal_path_only_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "answers.journal"
    path.mkdir()  # not a file: cannot be read, replaced or appended to
    journal = AnswerJournal(path, nothing_finished)
    journal.record(1, "k", answer("not recorded"))
    journal.finished(1)
    journal.close()
    assert journal.replay(1, "k") is None
    assert "answer journal" in caplog.text and path.is_dir()
    assert journal.problem is not None and str(path) in journal.problem


def test_finished_says_whether_an_example_was_answered_from_the_journal_only(
    tmp_path: Path,
) -> None:
    """What the progress rate leaves out: an example whose every answer was replayed is no
    work of this session; one that also asked the server is."""
    path = tmp_path / "answers.journal"
    journal = AnswerJournal(path, nothing_finished)
    key = request_key("chat/completions", b'{"q":1}')
    for example in (1, 2):
        journal.record(example, key, answer(f"example {example}"))
    journal.close()

    reopened = AnswerJournal(path, nothing_finished)
    assert reopened.replay(1, key) == stored("example 1")
    assert reopened.replay(2, key) == stored("example 2")
    reopened.record(2, request_key("chat/completions", b'{"q":2}'), answer("a second turn"))
    reopened.record(3, key, answer("example 3"))
    assert reopened.finished(1) is True
    assert reopened.finished(2) is False
    assert reopened.finished(3) is False
    assert reopened.finished(1) is False  # forgotten once finished
    reopened.close()
