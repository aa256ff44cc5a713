"""vscode_launch: our entries in the user's JSONC launch.json, the rest kept byte for byte."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import json5
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_debug.contract import spec
from remote_debug.laptop.ide import vscode_launch as vl
from remote_debug.laptop.ide.vscode_launch import LaunchJsonError, RankTarget
from remote_debug.oskit import osutil

# The user's file, as segments that must survive untouched (comments, trailing commas, odd spacing).
USER_SEGMENTS = [
    "// my launch file, do not lose this comment\n{\n",
    '    "version": "0.2.0", // trailing line comment\n',
    "    /* a block comment\n       over two lines */\n",
    '    "configurations": [\n',
    "        // my own config comes first\n",
    '        {\n            "name": "Python: current file", /* inline */\n'
    '            "type": "debugpy",\n            "request": "launch",\n'
    '            "program": "${file}",   // odd spacing kept\n        },\n',
    '        {"name": "remote-debug: someoneelse rank 0 (algo-1)", "request": "attach"},\n',
    "    ],\n",
    '    "compounds": [\n',
    '        {"name": "mine", "configurations": ["Python: current file"],},\n',
    "    ],\n",
    '    "inputs": [], // the end\n',
    "}\n",
]
USER_TEXT = "".join(USER_SEGMENTS)


@pytest.fixture(autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our notes about launch.json edits go to the state dir: a throwaway one, never the real HOME's."""
    monkeypatch.setenv("REMOTE_DEBUG_HOME", str(tmp_path_factory.mktemp("state")))


def target(rank: int, job: str = "myjob", node: str = "algo-1", *, root: str = "/ws", port: int = 0) -> RankTarget:
    return RankTarget(
        job=job,
        rank=rank,
        node=node,
        host="127.0.0.1",
        port=port or 40000 + rank,
        local_root=root,
        remote_root="/opt/ml/code",
    )


def targets(workspace: Path, ranks: range | list[int], job: str = "myjob") -> list[RankTarget]:
    return [target(r, job, f"algo-{1 + r // 2}", root=str(workspace)) for r in ranks]


def launch(workspace: Path) -> Path:
    return workspace / ".vscode" / "launch.json"


def write_user(workspace: Path, text: str) -> Path:
    path = launch(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    return path


def parsed(path: Path) -> dict[str, Any]:
    data = json5.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def names(data: dict[str, Any], key: str = "configurations") -> list[str]:
    return [c.get("name") for c in data.get(key, [])]


def test_names() -> None:
    assert vl.config_name("myjob", 3, "algo-2") == "remote-debug: myjob rank 3 (algo-2)"
    assert vl.compound_name("myjob") == "remote-debug: myjob all ranks"


def test_the_compound_is_named_for_the_ranks_it_holds(tmp_path: Path) -> None:
    """``attach --ranks 0`` of a 2-rank job: its compound is "rank 0", not "all ranks"; back to every
    rank, "all ranks" replaces it (never both)."""
    path = vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, [0]), world_size=2)
    assert names(parsed(path), "compounds") == ["remote-debug: myjob rank 0"]
    assert parsed(path)["compounds"][0]["configurations"] == ["remote-debug: myjob rank 0 (algo-1)"]
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, [0, 2]), world_size=4)
    assert "remote-debug: myjob ranks 0, 2" in names(parsed(path), "compounds")
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, [0, 1, 2, 3, 6]), world_size=8)
    assert "remote-debug: myjob ranks 0-3, 6" in names(parsed(path), "compounds")
    assert "remote-debug: myjob ranks 0, 2" not in names(parsed(path), "compounds")
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(2)), world_size=2)
    assert names(parsed(path), "compounds") == ["remote-debug: myjob all ranks"]
    assert vl.compound_name("myjob", [1], 2) == "remote-debug: myjob rank 1"
    assert vl.compound_name("myjob", [0, 1], None) == "remote-debug: myjob all ranks"  # world size unknown


def test_a_multi_node_job_has_a_compound_per_node_in_node_order(tmp_path: Path) -> None:
    """64 ranks are not a list to scroll: "all ranks", or one node's ranks, or one rank (algo-2 before
    algo-10); back to one node, the node compounds go."""
    ten_nodes = [target(r, node=f"algo-{r // 8 + 1}", root=str(tmp_path)) for r in range(80)]
    path = vl.update_launch_json(tmp_path, "myjob", ten_nodes, world_size=80)
    compounds = parsed(path)["compounds"]
    assert [c["name"] for c in compounds] == [
        "remote-debug: myjob all ranks",
        *(f"remote-debug: myjob node algo-{n}" for n in range(1, 11)),
    ]
    assert compounds[10]["configurations"] == [f"remote-debug: myjob rank {r} (algo-10)" for r in range(72, 80)]
    assert len(compounds[0]["configurations"]) == 80
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(2)), world_size=2)
    assert names(parsed(path), "compounds") == ["remote-debug: myjob all ranks"]
    vl.update_launch_json(tmp_path, "myjob", ten_nodes, world_size=80)
    assert vl.remove_job_configs(tmp_path, "myjob")  # every compound of the job goes with its configurations
    assert not path.exists()  # the file was ours alone: restored to not existing


def test_new_file_is_created(tmp_path: Path) -> None:
    path = vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(2)))
    assert path == launch(tmp_path)
    data = parsed(path)
    assert data["version"] == "0.2.0"
    assert data["configurations"] == [
        {
            "name": f"remote-debug: myjob rank {r} (algo-1)",
            "type": "debugpy",
            "request": "attach",
            "connect": {"host": "127.0.0.1", "port": 40000 + r},
            "pathMappings": [{"localRoot": "${workspaceFolder}", "remoteRoot": "/opt/ml/code"}],
            "redirectOutput": True,  # the rank's prints, live in its Debug Console
            "justMyCode": False,
        }
        for r in range(2)
    ]
    assert data["compounds"] == [
        {
            "name": "remote-debug: myjob all ranks",
            "configurations": ["remote-debug: myjob rank 0 (algo-1)", "remote-debug: myjob rank 1 (algo-1)"],
            "stopAll": False,
        }
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_user_content_survives_byte_for_byte(tmp_path: Path) -> None:
    path = write_user(tmp_path, USER_TEXT)
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(3)), debug_type="python")
    text = path.read_text(encoding="utf-8")
    for segment in USER_SEGMENTS[:-1]:
        if segment.strip() not in ("],", "}"):  # the closing brackets now follow our entries
            assert segment in text, segment
    data = parsed(path)
    before = json5.loads(USER_TEXT)
    assert data["configurations"][:2] == before["configurations"]  # user's first, untouched, in place
    assert names(data)[2:] == [f"remote-debug: myjob rank {r} (algo-{1 + r // 2})" for r in range(3)]
    assert all(c["type"] == "python" for c in data["configurations"][2:])
    assert data["compounds"][0] == before["compounds"][0]
    assert names(data, "compounds") == [
        "mine",
        "remote-debug: myjob all ranks",
        "remote-debug: myjob node algo-1",
        "remote-debug: myjob node algo-2",
    ]
    assert data["inputs"] == [] and data["version"] == "0.2.0"


def test_rerun_is_byte_identical_and_does_not_rewrite(tmp_path: Path) -> None:
    path = write_user(tmp_path, USER_TEXT)
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(4)))
    first = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    time.sleep(0.02)
    vl.update_launch_json(tmp_path, "myjob", list(reversed(targets(tmp_path, range(4)))))
    assert path.read_bytes() == first and path.stat().st_mtime_ns == mtime


def test_fewer_ranks_drop_the_stale_ones_in_place(tmp_path: Path) -> None:
    path = write_user(tmp_path, USER_TEXT)
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(3)))
    # the user adds a config after ours: ours must stay where they are, and theirs after them
    text = path.read_text()
    marker = '"remote-debug: myjob rank 2 (algo-2)"'
    end = text.index("}", text.index('"justMyCode"', text.index(marker))) + 1
    text = text[:end] + ',\n        {"name": "added later"}' + text[end:]
    path.write_text(text)
    vl.update_launch_json(tmp_path, "myjob", [target(0, root=str(tmp_path), port=45000)])
    data = parsed(path)
    assert names(data) == [
        "Python: current file",
        "remote-debug: someoneelse rank 0 (algo-1)",
        "remote-debug: myjob rank 0 (algo-1)",
        "added later",
    ]
    assert data["configurations"][2]["connect"]["port"] == 45000
    assert data["compounds"][1]["configurations"] == ["remote-debug: myjob rank 0 (algo-1)"]


def test_two_jobs_coexist_and_prefixes_do_not_collide(tmp_path: Path) -> None:
    vl.update_launch_json(tmp_path, "a", targets(tmp_path, range(2), job="a"))
    vl.update_launch_json(tmp_path, "a-b", targets(tmp_path, range(1), job="a-b"))
    vl.update_launch_json(tmp_path, "a", targets(tmp_path, range(1), job="a"))
    data = parsed(launch(tmp_path))
    assert names(data) == ["remote-debug: a rank 0 (algo-1)", "remote-debug: a-b rank 0 (algo-1)"]
    assert names(data, "compounds") == ["remote-debug: a all ranks", "remote-debug: a-b all ranks"]
    assert vl.remove_job_configs(tmp_path, "a")
    data = parsed(launch(tmp_path))
    assert names(data) == ["remote-debug: a-b rank 0 (algo-1)"]
    assert names(data, "compounds") == ["remote-debug: a-b all ranks"]
    assert not vl.remove_job_configs(tmp_path, "a")


@pytest.mark.parametrize(
    "text",
    [
        # trailing commas
        '{\n    "version": "0.2.0",\n    "configurations": [\n        {"name": "x"},\n    ],\n'
        '    "compounds": [],\n}\n',
        # no trailing commas, a comment before the closing bracket
        '{\n    "version": "0.2.0",\n    "configurations": [\n        {"name": "x"} // last one\n    ],\n'
        '    "compounds": [\n        {"name": "c", "configurations": ["x"]}\n    ]\n}\n',
        # tabs and CRLF
        '{\r\n\t"configurations": [\r\n\t\t{"name": "x"},\r\n\t\t/* keep */\r\n\t\t{"name": "y"}\r\n\t],\r\n'
        '\t"compounds": []\r\n}',  # (an empty list with blanks inside would come back as [])
        # empty arrays
        '{"configurations": [], "compounds": []}',
    ],
)
def test_update_then_remove_restores_typical_files(tmp_path: Path, text: str) -> None:
    path = write_user(tmp_path, text)
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(3)))
    out = path.read_bytes().decode()
    assert len(names(parsed(path))) == len(names(json5.loads(text))) + 3
    if "\r\n" in text:
        assert "\n" not in out.replace("\r\n", "")  # no lone LF in a CRLF file
        assert '\r\n\t\t{\r\n\t\t\t"name": "remote-debug: myjob rank 0' in out  # the file's own indent
    assert vl.remove_job_configs(tmp_path, "myjob")
    assert path.read_bytes() == text.encode()


def test_comments_next_to_our_entries_are_kept(tmp_path: Path) -> None:
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(3)))
    path = launch(tmp_path)
    text = path.read_text()
    text = text.replace(
        '        {\n            "name": "remote-debug: myjob rank 1',
        '        // about rank 1\n        {\n            "name": "remote-debug: myjob rank 1',
    )
    end = '"justMyCode": false\n        }'
    text = text.replace(end + "\n    ],", end + " /* end */\n    ],")
    path.write_text(text)
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, [0]))
    out = path.read_text()
    assert "// about rank 1" in out and "/* end */" in out
    assert names(parsed(path)) == ["remote-debug: myjob rank 0 (algo-1)"]
    vl.remove_job_configs(tmp_path, "myjob")
    assert "// about rank 1" in path.read_text() and "/* end */" in path.read_text()
    assert names(parsed(path)) == []


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"configurations": [ {"name": "x",, } ]}', "not valid JSON"),
        ('{"configurations": [', "not valid JSON"),
        ("/* unterminated", "not valid JSON"),
        ('["not", "an", "object"]', "top level is not an object"),
        ('{"configurations": {"name": "x"}}', "'configurations' is not a list"),
        ('{"compounds": 3}', "'compounds' is not a list"),
    ],
)
def test_malformed_file_raises_and_is_untouched(tmp_path: Path, text: str, reason: str) -> None:
    path = write_user(tmp_path, text)
    os.chmod(path, 0o600)
    with pytest.raises(LaunchJsonError) as info:
        vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(1)))
    message = str(info.value)
    assert "\n" not in message and str(path) in message and reason in message
    assert path.read_bytes() == text.encode()
    with pytest.raises(LaunchJsonError):
        vl.remove_job_configs(tmp_path, "myjob")
    assert path.read_bytes() == text.encode()
    assert sorted(p.name for p in path.parent.iterdir()) == ["launch.json"]  # no temp files left


def test_blank_file_starts_afresh_and_mode_is_kept(tmp_path: Path) -> None:
    path = write_user(tmp_path, "\n")
    os.chmod(path, 0o600)
    assert not vl.remove_job_configs(tmp_path, "myjob")
    assert path.read_bytes() == b"\n"
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(1)))
    assert names(parsed(path)) == ["remote-debug: myjob rank 0 (algo-1)"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_missing_file_remove_is_a_no_op(tmp_path: Path) -> None:
    assert not vl.remove_job_configs(tmp_path, "myjob")
    assert not (tmp_path / ".vscode").exists()


def test_local_root_uses_workspace_folder(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    ts = [target(0, root=str(tmp_path)), target(1, root=str(tmp_path / "src")), target(2, root="/other/code")]
    vl.update_launch_json(tmp_path, "myjob", ts)
    roots = [c["pathMappings"][0]["localRoot"] for c in parsed(launch(tmp_path))["configurations"]]
    assert roots == ["${workspaceFolder}", "${workspaceFolder}/src", "/other/code"]


@pytest.mark.parametrize(
    "job, ts",
    [
        ("bad_job", [target(0, job="bad_job")]),
        ("myjob", [target(0, job="other")]),
        ("myjob", [target(0), target(0)]),
        ("myjob", []),
        ("myjob", [target(0, port=70000)]),
    ],
)
def test_bad_input_raises_and_writes_nothing(tmp_path: Path, job: str, ts: list[RankTarget]) -> None:
    with pytest.raises(spec.ContractError):
        vl.update_launch_json(tmp_path, job, ts)
    assert not (tmp_path / ".vscode").exists()


def test_json5_only_syntax_and_bom_are_preserved(tmp_path: Path) -> None:
    text = "\ufeff{\n  // JSON5 bits json-five keeps as written\n  version: '0.2.0',\n"
    text += "  configurations: [\n  ],\n}\n"
    path = write_user(tmp_path, text)
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(1)))
    out = path.read_text(encoding="utf-8")
    assert out.startswith("\ufeff{\n  // JSON5 bits json-five keeps as written\n  version: '0.2.0',\n")
    assert '\n  configurations: [\n    {\n      "name": "remote-debug: myjob rank 0 (algo-1)",' in out
    data = parsed(path)
    assert names(data) == ["remote-debug: myjob rank 0 (algo-1)"]
    assert names(data, "compounds") == ["remote-debug: myjob all ranks"]  # added: there was none


# --- property: update then remove is the identity on the user's bytes ---------------------------
#
# Generated JSONC documents: comments (// and /* */) in every gap, trailing commas, CRLF or LF,
# tabs, unicode, user configurations and compounds (including another job's remote-debug entries),
# other top-level fields, absent keys, empty arrays with blanks inside, a missing or blank file.

_WORDS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=12)


_COMMENTS = ["// c", "//", "// ünï €", '// 😀 "quoted", {brace}', "/* c */", "/**/", "/* a\n  b */", "/* , ] */"]


@st.composite
def _gap(draw: st.DrawFn, nl: str, indent: str) -> str:
    """Whitespace and comments between two tokens; a // comment always ends with its line break."""
    out = ""
    for piece in draw(st.lists(st.sampled_from([" ", "\t", "  ", nl, nl + indent, *_COMMENTS]), max_size=3)):
        out += piece + (nl + indent if piece.startswith("//") else "")
    return out


@st.composite
def _launch_documents(draw: st.DrawFn) -> str | None:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return None  # no launch.json yet
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    if kind == 1:
        return draw(st.sampled_from(["", nl, " " + nl + nl, "\t"]))  # blank: starts afresh
    unit = draw(st.sampled_from(["    ", "  ", "\t", ""]))

    def gap(indent: str) -> str:
        return draw(_gap(nl, indent))

    def array(items: list[str], indent: str) -> str:
        if not items:
            return "[" + draw(st.sampled_from(["", " ", nl + indent, gap(indent)])) + "]"
        inner = indent + unit
        body = ",".join(gap(inner) + nl + inner + item + gap(inner) for item in items)
        trailing = "," if draw(st.booleans()) else ""
        return "[" + body + trailing + gap(inner) + nl + indent + "]"

    def user_config(i: int) -> str:
        name = draw(
            st.sampled_from(
                [f"Python: file {i}", "remote-debug: other rank 0 (algo-1)", "remote-debug: myjob-2 rank 1 (algo-1)"]
            )
            | _WORDS
        )
        fields = [f'"name": {json.dumps(name, ensure_ascii=draw(st.booleans()))}', '"type": "debugpy"']
        if draw(st.booleans()):
            fields.append('"request": "launch", "program": "${file}"')
        if draw(st.booleans()):
            fields.append('"env": {"A": "1", /* keep */ "B": [1, 2.5e3, true, null]}')
        return "{" + ("," + gap("")).join(fields) + (", " if draw(st.booleans()) else "") + "}"

    members: list[tuple[str, str]] = []
    if draw(st.booleans()):
        members.append(("version", '"0.2.0"'))
    if draw(st.integers(0, 4)):
        n = draw(st.integers(0, 3))
        members.append(("configurations", array([user_config(i) for i in range(n)], unit)))
    if draw(st.integers(0, 2)):
        n = draw(st.integers(0, 2))
        members.append(("compounds", array(['{"name": "mine", "configurations": ["x"]}'] * n, unit)))
    if draw(st.booleans()):
        members.append(("inputs", array([], unit)))
    if draw(st.booleans()):
        members.append(("ünïcode", json.dumps(draw(_WORDS), ensure_ascii=False)))
    members = draw(st.permutations(members))
    if not members:
        return "{" + gap(unit) + "}" + draw(st.sampled_from(["", nl]))
    body = ",".join(
        gap(unit) + nl + unit + json.dumps(k, ensure_ascii=False) + ":" + " " + v + gap(unit) for k, v in members
    )
    trailing = "," if draw(st.booleans()) else ""
    head = draw(st.sampled_from(["", "\ufeff", "// my file" + nl]))
    return head + "{" + body + trailing + gap(unit) + nl + "}" + draw(st.sampled_from(["", nl, nl + nl]))


_FAST_TMP = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # fsync costs nothing on tmpfs


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(original=_launch_documents(), ranks=st.integers(1, 2), twice=st.integers(0, 3).map(lambda i: i == 0))
def test_property_update_then_remove_is_identity(original: str | None, ranks: int, twice: bool) -> None:
    with tempfile.TemporaryDirectory(dir=_FAST_TMP) as tmp:
        workspace = Path(tmp)
        path = launch(workspace)
        if original is not None:
            write_user(workspace, original)
        try:
            vl.update_launch_json(workspace, "myjob", targets(workspace, range(ranks)))
        except LaunchJsonError as exc:  # a file we cannot edit exactly is refused, untouched
            assert "cannot reproduce" in str(exc), exc
            assert original is not None and path.read_bytes() == original.encode()
            return
        # (remove_job_configs below parses what we wrote: it refuses anything but valid JSONC)
        assert path.read_text(encoding="utf-8").count('"name": "remote-debug: myjob rank ') == ranks
        if twice:  # a re-attach with fewer ranks rewrites our entries in place
            vl.update_launch_json(workspace, "myjob", targets(workspace, range(3 - ranks)))
        vl.remove_job_configs(workspace, "myjob")
        if original is None:
            assert not path.exists() and not path.parent.exists()
        else:
            assert path.read_bytes() == original.encode()
        assert sorted(p.name for p in workspace.iterdir()) == ([".vscode"] if original is not None else [])


# --- an editor saving while we write ---------------------------------------------------------------


def race_editor(monkeypatch: pytest.MonkeyPatch, path: Path, saves: list[bytes]) -> None:
    """Each of the next ``len(saves)`` writes of ``path`` finds that "the editor" saved ``saves[i]``
    just before the rename: the unless-changed check must see it and the write must not happen."""
    real = osutil.NoFollowDir.write  # launch.json is written relative to its folder, never through a link

    def write(folder: osutil.NoFollowDir, name: str, data: bytes, *args: Any, **kwargs: Any) -> bool:
        if folder.path / name == path and saves:
            inner = kwargs.get("unless_changed")
            text = saves.pop(0)

            def editor_saved() -> bool:
                path.write_bytes(text)
                return inner() if inner else True

            kwargs["unless_changed"] = editor_saved
        return real(folder, name, data, *args, **kwargs)

    monkeypatch.setattr(osutil.NoFollowDir, "write", write)


def test_a_key_the_user_saves_during_our_write_is_never_removed_by_us(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an entry of ours from an earlier attach, no "compounds": our first attempt adds that key (and
    # notes that we did); meanwhile the user saves their own empty "compounds".  The retry uses
    # theirs, so removing our entries must leave it there.
    ours = '{"name": "remote-debug: myjob rank 0 (algo-1)", "type": "debugpy", "request": "attach"}'
    path = write_user(tmp_path, '{\n    "version": "0.2.0",\n    "configurations": [\n        ' + ours + "\n    ]\n}\n")
    theirs = path.read_bytes().replace(b"    ]\n}", b'    ],\n    "compounds": []\n}')
    race_editor(monkeypatch, path, [theirs])
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(2)))
    assert names(parsed(path), "compounds") == ["remote-debug: myjob all ranks"]
    assert vl.remove_job_configs(tmp_path, "myjob")
    assert parsed(path) == {"version": "0.2.0", "configurations": [], "compounds": []}


def test_give_back_that_meets_an_editor_save_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the file was blank, so the last remove gives the blank text back; the editor saves (our entry,
    # touched) just then: the retry must still give the blank file back, and not lose the note about it
    path = write_user(tmp_path, "\n")
    vl.update_launch_json(tmp_path, "myjob", targets(tmp_path, range(1)))
    touched = path.read_bytes().replace(b'"justMyCode": false', b'"justMyCode": true')
    assert touched != path.read_bytes()
    race_editor(monkeypatch, path, [touched])
    assert vl.remove_job_configs(tmp_path, "myjob")
    assert path.read_bytes() == b"\n"
