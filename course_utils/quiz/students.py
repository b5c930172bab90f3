"""Who submitted what: find the notebook files in the layouts instructors get, safely, and match them to students.

Layouts recognised, file by file (a class may mix them):

- an LMS download (Canvas style): `<name>_<userid>_<submissionid>_<original file name>`, `<name>_LATE_<userid>_...`
  for late work, and a `-1`, `-2` suffix on the original name for a resubmitted file of the same name;
- a zip of such a download (read in place, never extracted);
- nbgrader: `submitted/<student>/<assignment>/<notebook>.ipynb`, with nbgrader's `timestamp.txt` beside it;
- JupyterHub home folders and one folder per student: `<student>/.../<notebook>.ipynb` under the folder given.

A roster CSV (`student_id` required; `name`, `login`, `email`, `canvas_id`, `section` and `aliases` optional) maps any
of those keys to one student. Files are opened as regular files only: links are never followed, FIFOs and devices are
never opened, and nothing is read past MAX_BYTES, so no entry in the folder can block, redirect or swamp a batch.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import os
import re
import stat
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .source import MAX_BYTES

__all__ = ["Entry", "Student", "Roster", "RosterError", "discover", "load_roster", "printable", "MAX_FILES"]

MAX_FILES = 200_000      # entries looked at under one folder or zip
MAX_DEPTH = 16
# Canvas writes the name without separators; a name with underscores (another LMS, a renamed file) still parses.
_CANVAS = re.compile(r"(?P<name>.{1,200}?)(?P<late>_LATE)?_(?P<uid>\d{1,20})_(?P<sid>\d{1,20})_(?P<file>.{1,500})",
                     re.S)
_RESUBMIT = re.compile(r"(?:-(\d{1,6})|\s?\((\d{1,6})\))$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NBGRADER_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s*(UTC|Z|[+-]\d{2}:?\d{2})?")


def printable(name: str, limit: int = 300) -> str:
    """A name safe to show and to write in a CSV: bytes that were not UTF-8 as \\xNN, control characters escaped."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass
class Entry:
    """One notebook file found among the submissions, before it is read.

    `read()` returns the file's bytes (at most MAX_BYTES + 1 of them) or a sentence saying why it could not be read.
    `key` is who the layout says it belongs to (None: the layout does not say), `stem` the notebook's file name with the
    LMS's decorations taken off, `order` sorts a student's files from oldest to newest.
    """
    display: str
    read: Callable[[], bytes | str]
    key: str | None
    layout: str
    stem: str
    submitted: dt.datetime | None = None
    late_flag: bool = False
    order: tuple = ()
    name_hint: str = ""


@dataclass(frozen=True)
class Student:
    """A student of the roster (or one known only from the submissions, with `in_roster` False)."""
    student_id: str
    name: str = ""
    login: str = ""
    email: str = ""
    canvas_id: str = ""
    section: str = ""
    in_roster: bool = True

    @property
    def identities(self) -> set[str]:
        """Every string that names this student, folded to lower case."""
        return {v.casefold() for v in (self.student_id, self.login, self.email, self.canvas_id) if v}


class RosterError(ValueError):
    """A roster file that cannot be used; the message names the file, the line and the column."""


@dataclass
class Roster:
    """The class list: students in file order and every identity (id, login, email, LMS id, alias) -> student."""
    students: list[Student] = field(default_factory=list)
    by_identity: dict[str, Student] = field(default_factory=dict)

    def find(self, key: str) -> Student | None:
        """The student a layout's key names (case ignored; JupyterHub's `jupyter-` prefix too), or None."""
        folded = key.casefold()
        for candidate in (folded, folded.removeprefix("jupyter-")):
            if candidate in self.by_identity:
                return self.by_identity[candidate]
        return None


_ROSTER_COLUMNS = {"student_id", "name", "login", "email", "canvas_id", "section", "aliases"}
# The LMS's own exports work as rosters as they are: Canvas's gradebook export (Student, ID, SIS User ID, SIS Login
# ID, Section) and Moodle's (First name, Last name, ID number, Email address, Username).
_SYNONYMS = {"student": "name", "id": "canvas_id", "sis user id": "student_id", "sis login id": "login",
             "id number": "student_id", "email address": "email", "username": "login", "full name": "name"}


def load_roster(path: str | Path) -> Roster:
    """Read a roster CSV; raises RosterError naming the file, line and column of the first problem."""
    path = Path(path)
    try:
        if not path.is_file():
            raise RosterError(f"{path}: no such file")
        raw = path.read_bytes()[:10 * 1024 * 1024 + 1]
    except OSError as e:
        raise RosterError(f"{path}: cannot be read: {e.strerror or e}") from None
    if len(raw) > 10 * 1024 * 1024:
        raise RosterError(f"{path}: over 10 MB; a roster is one line per student")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise RosterError(f"{path}: not UTF-8 (bad byte at offset {e.start}); save it as CSV UTF-8") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip().casefold() for h in reader.fieldnames or []]
    header = [h if h in _ROSTER_COLUMNS or h not in _SYNONYMS or _SYNONYMS[h] in header else _SYNONYMS[h]
              for h in header]
    if "student_id" not in header:
        raise RosterError(f"{path}: line 1: needs a `student_id` column (optional: name, login, email, canvas_id, "
                          f"section, aliases; or Canvas's or Moodle's gradebook export as it is); found "
                          f"{', '.join(header) or 'no header'}")
    reader.fieldnames = header
    roster, ids = Roster(), set()
    for line, row in enumerate(reader, start=2):
        if None in row:
            raise RosterError(f"{path}: line {line}: more fields than the header has")
        values = {k: (row.get(k) or "").strip() for k in _ROSTER_COLUMNS}
        if not values["name"] and (row.get("first name") or row.get("last name")):
            values["name"] = f"{(row.get('first name') or '').strip()} {(row.get('last name') or '').strip()}".strip()
        if values["name"].casefold() in ("points possible", "student, test") or not any(values.values()):
            continue  # the second line of a Canvas export, and its test student
        if not values["student_id"]:
            # A course not linked to a student information system leaves Canvas's SIS User ID blank: the LMS's own
            # id, the login or the email still name the student.
            values["student_id"] = values["canvas_id"] or values["login"] or values["email"]
        if not values["student_id"]:
            raise RosterError(f"{path}: line {line}: no id for this student: student_id (or canvas_id, login, "
                              "email) is empty")
        student = Student(**{k: values[k] for k in _ROSTER_COLUMNS - {"aliases"}})
        if student.student_id in ids:
            raise RosterError(f"{path}: line {line}: student_id {student.student_id!r} appears twice")
        aliases = [a.strip() for a in values["aliases"].split(";") if a.strip()]
        for identity in student.identities | {a.casefold() for a in aliases}:
            other = roster.by_identity.get(identity)
            if other is not None and other is not student:
                raise RosterError(f"{path}: line {line}: {identity!r} already names student {other.student_id!r}")
            roster.by_identity[identity] = student
        roster.students.append(student)
        ids.add(student.student_id)
    return roster


# ------------------------------------------------------------------------------------------------------ reading files

def _open_regular(path: str | bytes | Path) -> int | str:
    """A file descriptor on a regular file, opened without following a link and without blocking; or why not."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if os.path.islink(path):
            return "a link, not followed"
        return f"could not be opened ({e.strerror or e})"
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        return f"not a regular file ({_kind(mode)}), not read"
    return fd


def _read_regular(path: str | bytes) -> bytes | str:
    """The bytes of a regular file (at most MAX_BYTES + 1 of them), read as _open_regular opens it; or why not."""
    fd = _open_regular(path)
    if isinstance(fd, str):
        return fd
    try:
        if os.fstat(fd).st_size > MAX_BYTES:
            return f"file over {MAX_BYTES // (1024 * 1024)} MB, not read"
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError as e:
        return f"could not be read ({e.strerror or e})"
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK,
                       "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return "not a plain file"


def _walk(root: Path) -> Iterable[tuple[tuple[str, ...], os.DirEntry | None, str]]:
    """(relative parts, entry, problem) for every .ipynb and timestamp.txt below root; links are never followed."""
    stack, seen = [(root, ())], 0
    while stack:
        folder, parts = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            yield parts, None, f"folder could not be listed ({e.strerror or e})"
            continue
        subfolders = []
        for entry in entries:
            seen += 1
            if seen > MAX_FILES:
                yield parts, None, f"more than {MAX_FILES:,} entries; the rest were not looked at"
                return
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                if len(parts) < MAX_DEPTH:
                    subfolders.append((Path(entry.path), (*parts, entry.name)))
            elif entry.name.endswith((".ipynb", ".zip")) or entry.name == "timestamp.txt":
                yield (*parts, entry.name), entry, ""
        stack.extend(reversed(subfolders))


def _nbgrader_time(text: str) -> dt.datetime | None:
    m = _NBGRADER_TIME.search(text[:200])
    if not m:
        return None
    try:
        when = dt.datetime.fromisoformat(m.group(1).replace(" ", "T"))
    except ValueError:
        return None
    zone = m.group(2)
    if zone in (None, "UTC", "Z"):
        return when.replace(tzinfo=dt.timezone.utc)
    return dt.datetime.fromisoformat(f"{m.group(1).replace(' ', 'T')}{zone[:3]}:{zone[-2:]}")


def _strip_resubmission(stem: str) -> tuple[str, int]:
    m = _RESUBMIT.search(stem)
    if not m:
        return stem, 0
    return stem[:m.start()], int(m.group(1) or m.group(2))


def _classify(parts: tuple[str, ...], origin: str) -> dict:
    """Who a file belongs to and which notebook it is, from its path relative to the folder (or zip) given."""
    filename = parts[-1]
    base = filename[:-len(".ipynb")]
    # Outside an LMS download a "-1" or " (1)" suffix (a second browser download, a copy) says nothing of which file
    # came later, so only the LMS's suffix orders files; two files with nothing else between them are reported.
    if len(parts) >= 4 and "submitted" in parts[:-3]:
        i = len(parts) - 1 - parts[::-1].index("submitted")
        if len(parts) - i >= 4:
            return dict(key=parts[i + 1], layout="nbgrader", stem=_strip_resubmission(base)[0], order=(0, 0))
    m = _CANVAS.fullmatch(filename)
    if m:
        stem, n = _strip_resubmission(m.group("file")[:-len(".ipynb")] if m.group("file").endswith(".ipynb")
                                      else m.group("file"))
        return dict(key=m.group("uid"), layout=f"{origin}lms", stem=stem, late_flag=bool(m.group("late")),
                    order=(int(m.group("sid")), n), name_hint=m.group("name"))
    stem = _strip_resubmission(base)[0]
    if len(parts) >= 2:
        return dict(key=parts[0], layout=f"{origin}folder", stem=stem, order=(0, 0))
    return dict(key=None, layout=origin or "file", stem=stem, order=(0, 0))


def _inherit(where: dict, owner: dict | None) -> dict:
    """A zip member's file name says which notebook it is; an LMS-named zip says whose it is and when."""
    if owner is None or owner.get("key") is None:
        return where
    return {**where, **{k: owner[k] for k in ("key", "layout", "late_flag", "order", "name_hint", "submitted")
                        if k in owner}}


def _zip_entries(zf: zipfile.ZipFile, display_root: str, keep_open: list, owner: dict | None = None,
                 nested: bool = False) -> tuple[list[Entry], list[str]]:
    """The notebooks in an open zip (and in zips inside it, one level down), never extracted."""
    keep_open.append(zf)
    entries, problems = [], []
    infos = zf.infolist()
    if len(infos) > MAX_FILES:
        problems.append(f"{display_root}: more than {MAX_FILES:,} members; the rest were not looked at")
    for info in infos[:MAX_FILES]:
        if info.is_dir():
            continue
        parts = tuple(p for p in info.filename.replace("\\", "/").split("/") if p not in ("", ".", ".."))
        if not parts or any(p.startswith(".") or p == "__MACOSX" for p in parts):
            continue
        where = _inherit(_classify(parts, "zip:"), owner)
        member_name = printable(f"{display_root}:{'/'.join(parts)}")
        if parts[-1].endswith(".zip"):
            if nested:
                problems.append(f"{member_name}: a zip inside a zip inside a zip; not opened")
                continue
            content = _read_member(zf, info)
            if isinstance(content, str):
                problems.append(f"{member_name}: {content}")
                continue
            try:
                inner = zipfile.ZipFile(io.BytesIO(content))
            except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
                problems.append(f"{member_name}: not a readable zip file ({type(e).__name__})")
                continue
            found, more = _zip_entries(inner, member_name, keep_open, _inherit(_classify(parts, "zip:"), owner),
                                       nested=True)
            entries += found
            problems += more
            continue
        if not parts[-1].endswith(".ipynb"):
            continue
        entries.append(Entry(display=member_name, read=lambda info=info: _read_member(zf, info), **where))
    return entries, problems


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes | str:
    """A zip member's bytes, refused by its declared size and cut off at the cap whatever it declares."""
    if info.file_size > MAX_BYTES:
        return f"inflates to over {MAX_BYTES // (1024 * 1024)} MB, not read"
    try:
        with zf.open(info) as member:
            content = member.read(MAX_BYTES + 1)
    except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError, EOFError, ValueError) as e:
        return f"could not be unzipped ({type(e).__name__})"
    if len(content) > MAX_BYTES:
        return f"inflates to over {MAX_BYTES // (1024 * 1024)} MB, not read"
    return content


def _read_zip_handle(path: Path) -> zipfile.ZipFile | str:
    """A zip file opened in place, as _open_regular opens any file; or why not."""
    fd = _open_regular(path)
    if isinstance(fd, str):
        return fd
    handle = os.fdopen(fd, "rb")
    try:
        return zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        handle.close()
        return f"not a readable zip file ({type(e).__name__})"


def discover(paths: Iterable[str | Path], keep_open: list, file_times: bool = False) -> tuple[list[Entry], list[str]]:
    """Every notebook file under the paths given, and problems not tied to any one file.

    Folders are searched recursively (hidden ones skipped, links never followed); `.zip` files are read in place,
    each once. A `timestamp.txt` (nbgrader's) dates the notebooks beside it; with `file_times`, a notebook without one
    is dated by its modification time (home folders copied with their times kept, `cp -p` or `rsync -a`).
    Open zip files are appended to `keep_open`; the caller closes them once every entry has been read.
    Raises FileNotFoundError for a path that does not exist.
    """
    entries, problems, zips_seen = [], [], set()

    def add_zip(path: Path, shown: str, owner: dict | None) -> None:
        real = os.path.abspath(path)  # not realpath: a link is reported under its own name, not its target's
        if real in zips_seen:
            return
        zips_seen.add(real)
        zf = _read_zip_handle(path)
        if isinstance(zf, str):
            problems.append(f"{shown}: {zf}")
            return
        found, more = _zip_entries(zf, shown, keep_open, owner)
        entries.extend(found)
        problems.extend(more)

    for given in map(Path, paths):
        if not os.path.lexists(given):
            raise FileNotFoundError(given)
        if given.is_dir():
            timestamps: dict[tuple[str, ...], Path] = {}
            files = []
            for parts, entry, problem in _walk(given):
                if problem:
                    problems.append(f"{printable('/'.join(parts)) or printable(os.fsdecode(given))}: {problem}")
                elif parts[-1] == "timestamp.txt":
                    timestamps[parts[:-1]] = Path(entry.path)
                else:
                    files.append((parts, entry))
            for parts, entry in files:
                where = _classify(parts, "")
                if parts[:-1] in timestamps:
                    text = _read_regular(timestamps[parts[:-1]])
                    if isinstance(text, bytes):
                        where["submitted"] = _nbgrader_time(text[:200].decode("utf-8", "replace"))
                elif file_times:
                    where["submitted"] = _mtime(entry)
                shown = printable("/".join(parts))
                if parts[-1].endswith(".zip"):
                    # An LMS download saved beside other files, or a zip a student handed in: its own name (or
                    # folder) says whose notebooks are inside. A link or a FIFO named .zip is reported, never opened.
                    add_zip(Path(entry.path), shown, where if len(parts) > 1 or where["key"] else None)
                    continue
                entries.append(Entry(display=shown, read=lambda p=entry.path: _read_regular(p), **where))
        elif str(given).endswith(".zip"):
            add_zip(given, printable(given.name), None)
        else:
            where = _classify((given.parent.name, given.name) if given.parent.name else (given.name,), "")
            entries.append(Entry(display=printable(given.name), read=lambda p=given: _read_regular(p), **where))
    return entries, problems


def _mtime(entry: os.DirEntry) -> dt.datetime | None:
    try:
        return dt.datetime.fromtimestamp(entry.stat(follow_symlinks=False).st_mtime, dt.timezone.utc)
    except OSError:
        return None
