"""The generated demo class: deterministic, laid out as each LMS lays it out, and its expectations consistent."""
import csv
import dataclasses
import json
import os
import re
import stat
import zipfile
import zlib
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from course_utils.quiz import Quiz, load_quiz
from course_utils.quiz import demo_class as dc
from course_utils.quiz.source import CODE, MAX_BYTES, read_notebook

N = 12  # enough for every fixed profile (perfect, all wrong, alternate forms, resubmission, late, skip, absent)
STEMS = sorted(p.stem for p in dc.NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root by relative path (a zip: by member), with its bytes."""
    if root.is_file():
        with zipfile.ZipFile(root) as zf:
            return {name: zf.read(name) for name in zf.namelist()}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module", params=dc.LAYOUTS)
def demo(request, tmp_path_factory) -> dc.DemoClass:
    return dc.make_class(tmp_path_factory.mktemp(request.param), N, layout=request.param, seed=3)


def _notebooks(demo: dc.DemoClass):
    """(student, stem, relative path, bytes) of every latest file."""
    files = _tree(demo.submissions)
    for e in demo.students.values():
        for stem, rel in e.latest.items():
            yield e, stem, rel, files[rel]


def test_same_seed_same_bytes(tmp_path):
    for layout in dc.LAYOUTS:
        a = dc.make_class(tmp_path / f"{layout}_a", N, layout=layout, seed=5)
        b = dc.make_class(tmp_path / f"{layout}_b", N, layout=layout, seed=5)
        assert a.submissions.read_bytes() == b.submissions.read_bytes() if layout == "canvas_zip" else \
            _tree(a.submissions) == _tree(b.submissions)
        assert a.roster.read_bytes() == b.roster.read_bytes()
        assert a.students == b.students
    other = dc.make_class(tmp_path / "other", N, seed=6)
    assert _tree(other.submissions) != _tree(dc.make_class(tmp_path / "canvas_c", N, seed=5).submissions)


def test_a_larger_class_keeps_the_smaller_ones_students(tmp_path):
    small, large = dc.make_class(tmp_path / "a", 9, seed=1), dc.make_class(tmp_path / "b", 14, seed=1)
    for sid, e in small.students.items():
        assert dataclasses.replace(e, latest={}, older={}) == dataclasses.replace(large.students[sid], latest={},
                                                                                  older={})


def test_due_date_is_the_assignments():
    import tomllib

    with (dc.NOTEBOOK_DIR.parent / "quizzes" / "assignments" / f"{dc.ASSIGNMENT}.toml").open("rb") as f:
        assert tomllib.load(f)["due"] == dc.DUE


def test_roster(demo):
    with demo.roster.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["student_id", "name", "login", "email", "canvas_id"]
    assert [r["student_id"] for r in rows] == [f"s{i:04d}" for i in range(1, N + 1)] == list(demo.students)
    assert all(re.fullmatch(r"[a-z]+\d+", r["login"]) and r["canvas_id"].isdigit() for r in rows)
    for column in ("student_id", "login", "email", "canvas_id"):
        assert len({r[column] for r in rows}) == N, column
    names = [r["name"] for r in rows]
    assert any("," in n for n in names) and any(not n.isascii() for n in names)
    assert len(set(names)) < N, "two students share a name; only their ids tell them apart"


def test_every_layout_is_named_as_documented(demo):
    files = _tree(demo.submissions)
    stems = "|".join(STEMS)
    if demo.layout in ("canvas", "canvas_zip"):
        assert demo.submissions == demo.out / ("submissions" if demo.layout == "canvas" else "submissions.zip")
        pattern = re.compile(rf"(?P<name>[^\W_]+)(?P<late>_LATE)?_(?P<cid>\d+)_(?P<sub>\d+)_(?P<stem>{stems})"
                             rf"(?P<re>-1)?\.ipynb")
        assert all(pattern.fullmatch(name) for name in files), [n for n in files if not pattern.fullmatch(n)]
        for e in demo.students.values():
            for stem, rel in e.latest.items():
                m = pattern.fullmatch(rel)
                assert int(m["cid"]) == e.canvas_id and m["stem"] == stem
                assert bool(m["late"]) == e.late == (e.submitted_at[stem] > demo.due)
                assert bool(m["re"]) == (stem in e.older)
                if stem in e.older:
                    old = pattern.fullmatch(e.older[stem])
                    assert int(old["sub"]) < int(m["sub"]) and not old["re"] and old["stem"] == stem
                    assert files[e.older[stem]] != files[rel]
        if demo.layout == "canvas":
            for e in demo.students.values():
                for stem, rel in e.latest.items():
                    assert demo.path(rel).stat().st_mtime == pytest.approx(e.submitted_at[stem].timestamp())
    elif demo.layout == "nbgrader":
        assert demo.submissions == demo.out / "submitted"
        for name, data in files.items():
            login, assignment, leaf = name.split("/")
            assert assignment == dc.ASSIGNMENT and (leaf == "timestamp.txt" or leaf[:-6] in STEMS)
            if leaf == "timestamp.txt":
                text = data.decode()
                assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC", text)
                when = datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=timezone.utc)
                e = next(e for e in demo.students.values() if e.login == login)
                assert when == max(e.submitted_at.values()) and (when > demo.due) == e.late
        for e in demo.students.values():
            assert e.latest == {s: f"{e.login}/{dc.ASSIGNMENT}/{s}.ipynb" for s in STEMS if s not in e.missing}
            assert not e.older
    else:
        assert demo.submissions == demo.out / "home"
        for e in demo.students.values():
            assert e.latest == {s: f"{e.login}/notebooks/{s}.ipynb" for s in STEMS if s not in e.missing}
            assert all(p == f"{e.login}/notebooks/.ipynb_checkpoints/{s}-checkpoint.ipynb" for s, p in e.older.items())
        assert set(files) == {p for e in demo.students.values() for p in [*e.latest.values(), *e.older.values()]}


def test_the_class_holds_every_case(demo):
    students = list(demo.students.values())
    assert {"perfect", "all_wrong", "mix", "absent"} <= {e.profile for e in students}
    assert any(e.late for e in students) and any(e.alternate_forms for e in students)
    assert any(e.older for e in students) or demo.layout == "nbgrader"
    assert any(e.missing and e.profile != "absent" for e in students)
    statuses = {s for e in students for s in e.statuses.values()}
    assert {"correct", "wrong", "unanswered", "recorded", "missing"} <= statuses


def test_filled_notebooks_are_nbformat_4(demo):
    for _, stem, rel, data in _notebooks(demo):
        nb = json.loads(data)
        assert nb["nbformat"] == 4
        nbformat.validate(nbformat.reads(data.decode(), as_version=4))
        assert all(c.get("outputs", []) == [] for c in nb["cells"])
        source = json.loads((dc.NOTEBOOK_DIR / f"{stem}.ipynb").read_text(encoding="utf-8"))
        assert len(nb["cells"]) >= len(source["cells"]), "full size: every cell of the course's notebook is there"


def test_expected_totals(demo):
    questions = [q for stem in STEMS for name in dc.notebook_quizzes(stem) for q in load_quiz(name).questions]
    assert demo.points == {q.ref: q.points for q in questions if q.scored}
    assert demo.max_total == sum(q.points for q in questions if q.scored) > 0
    for e in demo.students.values():
        assert set(e.scores) == set(e.statuses) == {q.ref for q in questions}
        assert e.total == sum(e.scores[ref] for ref in demo.points)
        assert all(e.statuses[q.ref] in ("recorded", "unanswered", "missing") and e.scores[q.ref] == 0
                   for q in questions if not q.scored)
        assert set(e.missing) == set(STEMS) - set(e.latest)
        if e.profile == "perfect":
            assert e.total == demo.max_total and not e.missing and not e.late
        if e.profile in ("all_wrong", "absent"):
            assert e.total == 0
        if e.profile == "absent":
            assert e.missing == tuple(STEMS) and not e.latest


def test_answers_written_are_the_ones_expected(demo):
    """Read each file back as data and grade each answer purely against its key: it is what the profile says."""
    for e, stem, rel, data in _notebooks(demo):
        sub = read_notebook(data, rel)
        assert sub.readable and not sub.problems, (rel, sub.problems)
        # Off JupyterHub (an LMS download) the learner named themselves in setup(); on a hub, the hub did.
        assert sub.setup_student == (e.login if demo.layout.startswith("canvas") else None)
        refs = [f.ref for f in sub.answers]
        assert sorted(refs) == sorted(r for r in e.statuses if r.split(".")[0] in dc.notebook_quizzes(stem)), rel
        for found in sub.answers:
            name, qid = found.ref.split(".")
            quiz = load_quiz(name)
            quiz = quiz.for_student(e.login) if hasattr(quiz, "for_student") else quiz
            status = "code" if found.problem == CODE else quiz.grade(qid, found.value).status
            assert status == e.statuses[found.ref], (rel, found)


def test_alternate_forms_appear(tmp_path):
    demo = dc.make_class(tmp_path, 3, seed=0)
    e = demo.students["s0003"]
    assert e.profile == "perfect" and e.alternate_forms
    text = "".join(demo.path(p).read_text(encoding="utf-8") for p in e.latest.values())
    literals = re.findall(r'answer\(\\"[a-z0-9_]+\.[a-z0-9_]+\\", ([^)]*)\)', text)
    assert any(re.fullmatch(r'\\" ?[A-D] ?\\"|\\"\([a-d]\)\\"|\\"[a-d]\)\\"', lit) for lit in literals), literals
    assert any("/" in lit for lit in literals) and any(lit.startswith('\\"') and lit[2:3].isdigit() for lit in literals)


def test_missing_answer_cells_are_added(tmp_path, monkeypatch):
    """Before every notebook has one answer cell per question, the generator adds the cells it lacks."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nb = json.loads((dc.NOTEBOOK_DIR / "03_layernorm.ipynb").read_text(encoding="utf-8"))
    nb["cells"] = [c for c in nb["cells"] if "answer(" not in "".join(c["source"])]
    (folder / "03_layernorm.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.setattr(dc, "NOTEBOOK_DIR", folder)
    demo = dc.make_class(tmp_path / "out", 1, notebooks=["03_layernorm"])
    e = demo.students["s0001"]
    filled = nbformat.reads(demo.path(e.latest["03_layernorm"]).read_text(encoding="utf-8"), as_version=4)
    nbformat.validate(filled)
    found = read_notebook(demo.path(e.latest["03_layernorm"]).read_bytes(), "x").answers
    assert [f.ref for f in found] == [q.ref for q in load_quiz("03_layernorm").questions]
    quiz = load_quiz("03_layernorm")
    assert all(quiz.grade(f.ref.split(".")[1], f.value).correct for f in found)


def test_numeric_keys_come_from_for_student(tmp_path, monkeypatch):
    """Where a quiz is parameterised, each student's numeric answers follow that student's own key."""
    def for_student(self: Quiz, login: str) -> Quiz:
        shift = 100 + int(re.sub(r"\D", "", login))
        return dataclasses.replace(self, questions=tuple(
            dataclasses.replace(q, answer=q.answer + shift, mistakes=()) if q.kind == "numeric" else q
            for q in self.questions))

    monkeypatch.setattr(Quiz, "for_student", for_student, raising=False)
    demo = dc.make_class(tmp_path, 1, notebooks=["01_why_normalize"])
    e = demo.students["s0001"]
    found = read_notebook(demo.path(e.latest["01_why_normalize"]).read_bytes(), "x").answers
    quiz = for_student(load_quiz("01_why_normalize"), e.login)
    assert [f.value for f in found if quiz.question(f.ref.split(".")[1]).kind == "numeric"] == \
        [q.answer for q in quiz.questions if q.kind == "numeric"]


def test_small_notebooks_hold_only_answer_cells(tmp_path):
    demo = dc.make_class(tmp_path, 2, small=True)
    for e in demo.students.values():
        for rel in e.latest.values():
            nb = json.loads(demo.path(rel).read_bytes())
            assert nb["nbformat"] == 4 and all("answer(" in "".join(c["source"]) for c in nb["cells"])
            assert demo.path(rel).stat().st_size < 20_000


def test_command_line(tmp_path, capsys):
    assert dc.main([str(tmp_path / "c"), "--students", "4", "--layout", "nbgrader"]) == 0
    out = capsys.readouterr().out
    assert "4 students" in out and "submitted" in out and "--assignment" in out
    assert (tmp_path / "c" / "roster.csv").is_file() and (tmp_path / "c" / "expected.csv").is_file()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("hostile")
    return folder, dc.write_hostile(folder)


def test_hostile_folder_has_every_kind(hostile):
    folder, reports = hostile
    entries = {os.fsdecode(name): os.path.join(os.fsencode(folder), name) for name in os.listdir(os.fsencode(folder))}
    assert set(entries) == {name.split("/")[0] for name in reports}
    assert all(isinstance(v, str) and v for v in reports.values())

    def name_with(prefix: str) -> str:
        return next(n for n in entries if n.startswith(prefix))

    assert stat.S_ISFIFO(os.lstat(entries[name_with("fifo_")]).st_mode)
    assert os.readlink(entries[name_with("devzero_")]) == b"/dev/zero"
    target = os.readlink(entries[name_with("copycat_")])
    assert not os.path.isabs(target) and os.path.isfile(os.path.join(os.fsencode(folder), target))
    assert any(b"\xff" in os.fsencode(n) for n in entries) and not all(n.isprintable() for n in entries)
    for needle in ("\r", "\n", "\t", '"', ","):
        assert any(needle in n for n in entries), repr(needle)
    assert {n[0] for n in entries} >= {"=", "+", "-", "@"}
    assert {"a b_36_36_01_why_normalize.ipynb", "a_b_36_36_01_why_normalize.ipynb"} <= set(entries)
    assert os.path.isdir(entries[name_with("dir_")])
    assert os.path.getsize(entries[name_with("empty_")]) == 0


def test_hostile_contents(hostile):
    folder, _ = hostile

    def read(prefix: str) -> bytes:
        return next(folder.glob(f"{prefix}_*")).read_bytes()

    cell = "".join(json.loads(read("magic"))["cells"][0]["source"])
    assert cell.count("\n") > 65_536 and "\n%timeit" in cell
    huge = read("hugecell")
    assert 9_800_000 <= len(huge) < MAX_BYTES, "under the file cap, so the grader reaches the cell"
    random_bytes = read("random")
    assert len(random_bytes) == 10_000_000
    with pytest.raises(UnicodeDecodeError):
        random_bytes.decode()
    deep = read("deep")
    assert len(deep) >= 9_999_000 and deep.count(b"[") > 4_000_000
    with pytest.raises(RecursionError):
        json.loads(deep)
    many = json.loads(read("manycells"))
    assert len(read("manycells")) < MAX_BYTES and len(many["cells"]) == 200_000
    assert many["cells"][-1]["source"] == 'answer("x.q1", 1)'
    odd = "".join("".join(c["source"]) for c in json.loads(read("oddcalls"))["cells"])
    assert "**kw" in odd and "9**9**9" in odd and ", x)" in odd and "9" * 50_000 in odd
    assert json.loads(read("nbformat3"))["nbformat"] == 3
    with pytest.raises(json.JSONDecodeError):
        json.loads(read("invalid"))


def test_zip_bomb_members(hostile):
    folder, reports = hostile
    path = next(folder.glob("bombs_*.zip"))
    assert path.stat().st_size < 2 * 2**20
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        assert {f"{path.name}/{name}" for name in infos} <= set(reports)
        liar, zeros = (next(i for n, i in infos.items() if n.startswith(p)) for p in ("liar", "zeros"))
        assert liar.file_size < 10_000 and zeros.file_size == 2**30
        raw = path.read_bytes()
        start = liar.header_offset + 30 + len(liar.filename)
        inflate, size = zlib.decompressobj(-15), 0
        data = raw[start:start + liar.compress_size]
        while data:
            size += len(inflate.decompress(data, 2**24))
            data = inflate.unconsumed_tail
        assert size > 100 * 2**20
        crc = 0
        for _ in range(1024):
            crc = zlib.crc32(bytes(2**20), crc)
        assert crc == zeros.CRC
        with zf.open(zeros) as f:
            assert f.read(2**20) == bytes(2**20)


def test_hostile_kinds_one_at_a_time(tmp_path):
    for kind in dc.HOSTILE_KINDS:
        folder = tmp_path / kind
        assert dc.write_hostile(folder, [kind]), kind


def test_the_grading_benchmark_runs_on_a_small_class():
    """The benchmark script itself, on a class small enough for the test run; it checks the grader as it times it."""
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_grading.py"), "--students", "6",
                           "--small", "20", "--hostile-students", "0", "--repeats", "1"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "graded as expected" in done.stdout and "ms/nb" in done.stdout


def test_every_filled_code_cell_is_valid_python(tmp_path):
    """A learner's filled-in notebook runs: the id replaces `student=None` in setup() instead of repeating it."""
    demo = dc.make_class(tmp_path / "c", 3, layout="canvas")  # off a hub, learners name themselves in setup()
    for path in demo.submissions.glob("*07_review*.ipynb"):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                compile("\n".join("#" + line if line.lstrip()[:1] in "%!" else line for line in source.split("\n")),
                        str(path), "exec")  # compiled, never run: a repeated keyword fails here
        assert any("setup(student=" in "".join(c["source"]) for c in cells)
