"""File-writing options never destroy: ``compile --out`` and ``sensitivity --plot``."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen import cli, compiler
from codegen.compiler import MARKER, OutputDirectoryError, read_tree, render_tree, write_tree
from symbolic import registry


@pytest.fixture(scope="module")
def files():
    return render_tree([registry.get("cp_ring_mha_traffic_bytes")])


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_directory_of_other_files_is_refused_and_kept(files, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    (out / "cp.py").write_text("my own cp.py\n")
    with pytest.raises(OutputDirectoryError, match="not written by symcost compile"):
        write_tree(files, out)
    assert _snapshot(out) == {"notes.txt": b"my notes\n", "cp.py": b"my own cp.py\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_regular_file_is_refused_and_kept(files, tmp_path):
    target = tmp_path / "out"
    target.write_text("data\n")
    with pytest.raises(OutputDirectoryError, match="not a directory"):
        write_tree(files, target)
    assert target.read_text() == "data\n"


def test_a_file_added_to_a_generated_directory_is_refused_and_kept(files, tmp_path):
    out = tmp_path / "gen"
    write_tree(files, out)
    assert (out / MARKER).read_text().splitlines()[0] == compiler.MARKER_LINE
    (out / "extra.py").write_text("mine\n")
    with pytest.raises(OutputDirectoryError, match="extra.py, which symcost compile did not write"):
        write_tree(files, out)
    assert (out / "extra.py").read_text() == "mine\n"
    (out / "extra.py").unlink()
    assert write_tree(files, out).ok  # its own directory: accepted


def test_cli_refuses_empty_out_and_foreign_directories(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("x")
    for out in ("", "   ", ".", str(tmp_path / "keep.txt")):
        assert cli.main(["compile", "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith("symcost compile: error: ") and err.count("\n") == 1, err
    assert _snapshot(tmp_path) == {"keep.txt": b"x"}


names = st.text(alphabet="abcdpy_.", min_size=1, max_size=8).filter(lambda n: n not in (".", ".."))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_files=st.dictionaries(st.lists(names, min_size=1, max_size=2).map("/".join), st.binary(max_size=8),
                                  max_size=3),
       generated_first=st.booleans())
def test_compile_never_removes_a_file_it_did_not_write(files, tmp_path_factory, user_files, generated_first):
    out = tmp_path_factory.mktemp("prop") / "out"
    if generated_first:
        write_tree(files, out)
    placed = {}
    for rel, data in user_files.items():
        path = out / rel
        if any(parent.is_file() for parent in path.parents) or path.is_dir() or rel == MARKER or \
                (generated_first and rel in files):  # editing a file the marker lists is documented as lost
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        placed[rel] = data
    try:
        write_tree(files, out)
    except OutputDirectoryError:
        pass
    on_disk = _snapshot(out) if out.exists() else {}
    for rel, data in placed.items():
        assert on_disk.get(rel) == data, f"{rel} was removed or changed"
    if not placed:
        assert read_tree(out) == files
