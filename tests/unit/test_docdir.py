"""The flight recorder's directory against planted files: symlinks, foreign files, a full
disk (a real 64 KiB tmpfs), junk in the index (docs/threats.md: planted-symlinks,
foreign-files, full-disk, index-junk)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.postmortem.docdir import DocumentDir
from tests.helpers.hostile import FIXTURE_ARGS, http_get, serve

NAME = "20261130T220000Z-ns-pod-c-123.json"


def test_planted_symlinks_are_never_followed(tmp_path: Path) -> None:
    """The temporary name was predictable and opened without O_NOFOLLOW: a symlink
    planted under it made an OOM kill overwrite an outside file as root (docs/threats.md:
    planted-symlinks)."""
    d = tmp_path / "dir"
    d.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    # Links under every name a writer could use: the final name and old-style temps.
    os.symlink(outside, d / NAME)
    os.symlink(outside, d / NAME.replace(".json", ".tmp"))
    store = DocumentDir(d)
    used = store.write(NAME, b'{"a": 1}\n')
    assert outside.read_text() == "precious\n"
    assert used != NAME and (d / used).read_bytes() == b'{"a": 1}\n'
    assert (d / NAME).is_symlink()  # left alone, never replaced or followed
    assert store.read(NAME) is None  # and never served
    assert store.names() == [used]
    assert not [p for p in os.listdir(d) if p.endswith(".tmp") and p.startswith(".headroom")]


def test_pruning_deletes_only_its_own_oldest(tmp_path: Path) -> None:
    """Pruning globbed *.json: it deleted 11 foreign files and its newest document
    (docs/threats.md: foreign-files)."""
    d = tmp_path / "dir"
    d.mkdir()
    foreign = [f"zz-foreign-{i}.json" for i in range(11)] + ["notes.txt"]
    for f in foreign:
        (d / f).write_text("{}")
    os.mkfifo(d / "fifo.json")
    (d / "20200101T000000Z-subdir.json").mkdir()
    store = DocumentDir(d, max_documents=3)
    written = [store.write(f"20261130T2200{i:02d}Z-ns-pod-c-000.json", b"{}") for i in range(5)]
    left = set(os.listdir(d))
    assert set(foreign) | {"fifo.json", "20200101T000000Z-subdir.json"} <= left
    assert store.names() == written[-3:]  # the newest three of ours


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                         capture_output=True, timeout=30)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], timeout=30, check=False)


def test_full_disk_leaves_nothing_behind_and_names_never_collide(
        tiny_tmpfs: Path) -> None:
    """On a full flight-recorder disk each kill left a 0-byte *.tmp, and two kills of one
    workload in one millisecond wrote the same name (docs/threats.md: full-disk)."""
    store = DocumentDir(tiny_tmpfs / "oom", max_documents=50)
    small = json.dumps({"usage": list(range(100))}).encode()
    first = store.write(NAME, small)
    second = store.write(NAME, small)
    assert first == NAME and second != first and store.names() == sorted([first, second])
    with pytest.raises(OSError) as err:
        store.write("20261130T220001Z-ns-pod-c-000.json", b"x" * (256 << 10))
    assert err.value.errno == errno.ENOSPC
    assert sorted(os.listdir(tiny_tmpfs / "oom")) == sorted([first, second])
    assert store.write("20261130T220002Z-ns-pod-c-000.json", small)  # space enough again


def test_index_lists_only_regular_documents_it_wrote(tmp_path: Path) -> None:
    """On the real exporter: /debug/oom/ listed directories, FIFOs and symlinks, and served
    a JSON outside the directory through a link (docs/threats.md: index-junk, and
    planted-symlinks on the read side)."""
    d = tmp_path / "oom"
    d.mkdir()
    outside = tmp_path / "secret.json"
    outside.write_text('{"secret": true}')
    good = "20261130T220000Z-host-pod-c-001.json"
    (d / good).write_text('{"kind": "headroom.oom_kill/v1"}')
    os.symlink(outside, d / "20261130T220000Z-host-pod-c-002.json")
    os.mkfifo(d / "20261130T220000Z-host-pod-c-003.json")
    (d / "20261130T220000Z-host-pod-c-004.json").mkdir()
    (d / "foreign.json").write_text("{}")
    with serve([*FIXTURE_ARGS, f"--flight-recorder.dir={d}"], tmp_path) as s:
        status, _, body = http_get(s.url + "/debug/oom/?format=json", timeout=10)
        assert status == 200
        listed = json.loads(body)["documents"]
        assert [p.rsplit("/", 1)[-1] for p in listed] == [good]
        assert http_get(s.url + f"/debug/oom/{good}?format=json", timeout=10)[0] == 200
        for planted in ("002", "003", "004"):
            name = f"20261130T220000Z-host-pod-c-{planted}.json"
            assert http_get(s.url + f"/debug/oom/{name}?format=json", timeout=10)[0] == 404
        assert http_get(s.url + "/debug/oom/foreign.json", timeout=10)[0] == 404


def test_store_serves_from_memory_when_the_disk_is_full(tiny_tmpfs: Path) -> None:
    """On a full disk the document is still served (from memory), nothing is left on
    disk, and two kills of one workload in one millisecond keep two documents."""
    from exporter.model import Workload
    from exporter.oom.watcher import OomKill
    from exporter.postmortem.documents import DocumentStore

    (tiny_tmpfs / "filler").write_bytes(b"\0" * (60 << 10))
    store = DocumentStore(tiny_tmpfs / "oom")
    w = Workload("ns", "pod", "c")
    kill = OomKill(1764540000.5, "kubepods/x", w, Workload("ns", "pod", ""), "python3", 7,
                   "kmsg")
    big = {"usage": list(range(5000))}
    store.publish(kill, big)
    (name,) = store.names()
    assert store.get(name) == big
    assert not [p for p in os.listdir(tiny_tmpfs / "oom") if not p.startswith("2026")]
    (tiny_tmpfs / "filler").unlink()
    store.publish(kill, {"second": True})
    store.publish(kill, {"third": True})
    assert len(store.names()) == 3
    got = sorted(json.dumps(store.get(n)) for n in store.names())
    assert got == sorted(json.dumps(d) for d in (big, {"second": True}, {"third": True}))
    assert len(os.listdir(tiny_tmpfs / "oom")) == 2
