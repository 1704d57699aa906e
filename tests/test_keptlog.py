"""The kit's copy of a server log (keptlog.py): its head and tail, lines cut at LINE_BYTES, secrets masked even
across a cut, and figures that say how much was cut — from real files and a real (simulated) host's file."""

import random

import pytest

from launchlab.hosts.local import LocalHost
from launchlab.logparse.common import LINE_BYTES
from launchlab.masking import Masker
from launchlab.run import cleanup
from launchlab.store.keptlog import HEAD_BYTES, TAIL_BYTES, KeptLog


def lines(n: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    return b"".join(b"line %d " % i + b"x" * rng.randint(0, 150) + b"\n" for i in range(n))


def feed_in_pieces(kept: KeptLog, data: bytes, seed: int = 2) -> bytes:
    rng, seen, at = random.Random(seed), [], 0
    while at < data.__len__():
        n = rng.randint(1, 5000)
        seen.append(kept.feed(data[at:at + n]))
        at += n
    return b"".join(seen)


def test_a_log_shorter_than_head_and_tail_is_kept_byte_for_byte_and_the_watcher_sees_every_line(tmp_path):
    data = lines(1500)  # ~125 kB
    kept = KeptLog(tmp_path / "server.log", Masker(), head_bytes=100_000, tail_bytes=100_000)
    seen = feed_in_pieces(kept, data)
    cut = kept.close()
    assert seen == data
    assert (tmp_path / "server.log").read_bytes() == data
    assert (cut.written_bytes, cut.kept_bytes, cut.cut_bytes, cut.lines_cut, cut.cut) == (len(data), len(data), 0, 0,
                                                                                        False)


def test_a_longer_log_keeps_whole_lines_of_its_head_and_tail_and_marks_and_counts_what_was_cut(tmp_path):
    data = lines(3000)
    kept = KeptLog(tmp_path / "server.log", Masker(), head_bytes=20_000, tail_bytes=20_000)
    feed_in_pieces(kept, data)
    cut = kept.close()
    copy = (tmp_path / "server.log").read_bytes()
    head = copy[:cut.head_bytes]
    mark, _, tail = copy[cut.head_bytes:].partition(b"\n")
    assert data.startswith(head) and data.endswith(tail) and head.endswith(b"\n")
    assert len(head) == cut.head_bytes <= 20_000 and len(tail) == cut.tail_bytes <= 20_000
    assert cut.tail_bytes > 20_000 - 256 * 1024  # held in pieces: at most one piece less than its room
    assert cut.written_bytes - cut.cut_bytes == cut.head_bytes + cut.tail_bytes  # the figures add up
    assert f"[launchlab: {cut.cut_bytes:,} bytes of this server log not kept here".encode() in mark
    assert cut.note().startswith("server.log: ") and " kept (head " in cut.note()


def test_a_line_longer_than_line_bytes_is_cut_and_marked_and_a_secret_across_the_cut_is_masked_whole(tmp_path):
    secret = "sk-0123456789abcdef"
    long_line = b"a" * (LINE_BYTES - 6) + secret.encode() + b"b" * 3_000_000 + b"\n"
    data = b"key " + secret.encode() + b"\n" + long_line + b"after\n"
    kept = KeptLog(tmp_path / "server.log", Masker((secret,)))
    seen = feed_in_pieces(kept, data)
    cut = kept.close()
    copy = (tmp_path / "server.log").read_bytes()
    assert secret[:6].encode() not in copy and b"key ****\n" in copy  # not even its first part, kept before the cut
    assert copy.endswith(b"after\n")
    assert max(len(line) for line in copy.split(b"\n")) < LINE_BYTES + 100
    assert b"[launchlab: line cut at 64.0 KiB, 3,000,013 more bytes not kept]" in copy
    assert cut.lines_cut == 1 and cut.cut_bytes == 3_000_013
    assert max(len(line) for line in seen.split(b"\n")) <= LINE_BYTES  # the watcher gets the line cut too


def test_collection_copies_the_head_and_tail_of_a_large_log_from_the_host_without_reading_its_middle(tmp_path):
    remote = tmp_path / "host" / "server.log"
    remote.parent.mkdir()
    first, last = b"first line of the startup\n", b"RuntimeError: the last line\n"
    with open(remote, "wb") as fh:
        fh.write(first)
        fh.write(lines(400_000))  # ~35 MB
        fh.write(last)
    size = remote.stat().st_size
    host = LocalHost("box", workdir=str(tmp_path / "host"))
    reads = []
    read_bytes = host.read_bytes
    host.read_bytes = lambda path, offset=0, size=-1: reads.append((offset, size)) or read_bytes(path, offset, size)
    cut = cleanup.copy_log(host, str(remote), tmp_path / "server.log", Masker(), deadline=float("inf"))
    copy = (tmp_path / "server.log").read_bytes()
    assert copy.startswith(first) and copy.endswith(last)
    assert cut.written_bytes == size and cut.kept_bytes == len(copy) <= HEAD_BYTES + TAIL_BYTES + 200
    assert sum(n for _, n in reads) == HEAD_BYTES + TAIL_BYTES  # the middle was never read
    assert max(n for _, n in reads) <= cleanup.READ_BYTES


def test_collection_past_its_deadline_stops_between_reads(tmp_path):
    remote = tmp_path / "server.log.host"
    remote.write_bytes(lines(1000))
    with pytest.raises(cleanup._Late, match=r"0 of [\d,]+ bytes of .* read"):
        cleanup.copy_log(LocalHost("box", workdir=str(tmp_path)), str(remote), tmp_path / "server.log", Masker(),
                         deadline=0.0)
