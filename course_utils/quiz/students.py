"""Who submitted what: find the notebook files in the layouts instructors get, safely, and match them to students.

Layouts recognised (a class may mix them). Only the top level of the folder or zip given says whose a file is:

- an LMS download (Canvas style), files at the top: `<name>_<userid>_<submissionid>_<original file name>`,
  `<name>_LATE_<userid>_...` for late work, and a `-1`, `-2` suffix on the original name for a resubmitted file of the
  same name; a zip of such a download (read in place, never extracted);
- Moodle's download, a folder per student at the top: `<Full name>_<participant id>_assignsubmission_file/`;
- nbgrader: the course folder (or its `submitted/`), `submitted/<student>/<assignment>/<notebook>.ipynb`, with
  nbgrader's `timestamp.txt` in the assignment folder dating that submission;
- JupyterHub home folders and one folder per student: `<student>/.../<notebook>.ipynb` (TLJH's `jupyter-<user>` too).

Below the top level nothing names an owner or a date: a file in Eve's folder named like Ada's LMS file, or under
`submitted/ada/`, stays Eve's and is reported as a claim (`Entry.claim`); a `timestamp.txt` anywhere else dates
nothing. Each student's folder is walked with a budget of its own (MAX_STUDENT_ENTRIES), so one virtualenv costs its
owner's row, not the class.

A roster CSV (`student_id` required; `name`, `login`, `email`, `canvas_id`, `section`, `hub_user` and `aliases`
optional) maps any of those keys to one student. Files are opened as regular files only: links are never followed,
FIFOs and devices are never opened, and nothing is read past MAX_BYTES, so no entry in the folder can block, redirect
or swamp a batch.
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

__all__ = ["Entry", "Student", "Roster", "RosterError", "discover", "load_roster", "printable", "MAX_FILES",
           "MAX_STUDENT_ENTRIES", "MAX_STUDENT_ZIP_BYTES"]

MAX_FILES = 200_000      # entries looked at at the top of one folder, or in one zip
MAX_STUDENT_ENTRIES = 20_000   # files and folders looked at in one student's folder (or zips, or LMS files)
MAX_STUDENT_ZIP_BYTES = 64 << 20  # zips inside a student's zips, held in memory while the class is graded
MAX_DEPTH = 16
OVER_BUDGET = "over budget"
# Canvas writes the name without separators; a name with underscores (another LMS, a renamed file) still parses.
_CANVAS = re.compile(r"(?P<name>.{1,200}?)(?P<late>_LATE)?_(?P<uid>\d{1,20})_(?P<sid>\d{1,20})_(?P<file>.{1,500})",
                     re.S)
_RESUBMIT = re.compile(r"(?:-(\d{1,6})|\s?\((\d{1,6})\))$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Moodle's "Download all submissions": a folder per student, `<Full name>_<participant id>_assignsubmission_file_`.
_MOODLE = re.compile(r"(?P<name>.{1,200}?)_(?P<pid>\d{1,20})_assign(?:submission|feedback)_[a-z]{1,40}_?", re.S)
_NBGRADER_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s*"
                            r"((?:UTC|GMT)?[+-]\d{2}:?\d{2}|[A-Za-z][A-Za-z_/+-]{0,40})?")


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
    claim: str | None = None  # an owner the path names where nothing may name one (reported, decides nothing)
    problem: str = ""         # not a file to read: this owner ran over a budget (their row says so)
    note: str = ""            # a remark for this owner's row (a timestamp that dates nothing)


def hub_names(key: str) -> list[str]:
    """What $JUPYTERHUB_USER may have been for a home folder named `key`, most likely last: the name itself; for The
    Littlest JupyterHub's and the Kubernetes/Docker spawners' `jupyter-<user>`, the user; and that user with the
    spawners' escapes undone (`jupyter-ada-40uni-2eedu` is `ada@uni.edu`)."""
    names = [key]
    if key.casefold().startswith("jupyter-") and len(key) > len("jupyter-"):
        user = key[len("jupyter-"):]
        names.append(user)
        unescaped = re.sub(r"-([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), user)
        if unescaped != user and unescaped.isprintable():
            names.append(unescaped)
    return names


@dataclass(frozen=True)
class Student:
    """A student of the roster (or one known only from the submissions, with `in_roster` False)."""
    student_id: str
    name: str = ""
    login: str = ""
    email: str = ""
    canvas_id: str = ""
    section: str = ""
    hub_user: str = ""  # their JupyterHub user name, where it is none of the above (an e-mail, an LTI id)
    in_roster: bool = True

    @property
    def identities(self) -> set[str]:
        """Every string that names this student, folded to lower case (as quiz numbers are seeded: stripped too)."""
        return {v.strip().casefold() for v in (self.student_id, self.login, self.email, self.canvas_id, self.hub_user)
                if v}


class RosterError(ValueError):
    """A roster file that cannot be used; the message names the file, the line and the column."""


@dataclass
class Roster:
    """The class list: students in file order and every identity (id, login, email, LMS id, alias) -> student."""
    students: list[Student] = field(default_factory=list)
    by_identity: dict[str, Student] = field(default_factory=dict)

    def find(self, key: str) -> Student | None:
        """The student a layout's key names (case ignored; JupyterHub's `jupyter-` prefix too), or None."""
        for candidate in hub_names(key.strip()):
            if candidate.casefold() in self.by_identity:
                return self.by_identity[candidate.casefold()]
        return None

    def named(self, name: str) -> Student | None:
        """The one student of this name (case and spacing ignored), or None (nobody, or two of that name): Moodle's
        download names a student by full name and an id of its own that its grade export does not hold."""
        folded = " ".join(name.split()).casefold()
        found = [s for s in self.students if folded and " ".join(s.name.split()).casefold() == folded]
        return found[0] if len(found) == 1 else None


_ROSTER_COLUMNS = {"student_id", "name", "login", "email", "canvas_id", "section", "hub_user", "aliases"}
# The LMS's own exports work as rosters as they are: Canvas's gradebook export (Student, ID, SIS User ID, SIS Login
# ID, Section) and Moodle's (First name, Last name, ID number, Email address, Username).
_SYNONYMS = {"student": "name", "id": "canvas_id", "sis user id": "student_id", "sis login id": "login",
             "id number": "student_id", "email address": "email", "username": "login", "full name": "name",
             "jupyterhub user": "hub_user", "hub user": "hub_user", "identifier": "aliases"}


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
        # Moodle's grading worksheet names each student "Participant 123456", the number its download's folders carry
        aliases += [m.group(1) for a in aliases if (m := re.fullmatch(r"participant\s+(\d{1,20})", a, re.I))]
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


def _walk(folder: Path, parts: tuple[str, ...], budget: int
          ) -> Iterable[tuple[tuple[str, ...], os.DirEntry | None, str]]:
    """(relative parts, entry, problem) for every .ipynb, .zip and timestamp.txt below folder (whose parts are given),
    looking at no more than `budget` entries; links are never followed, hidden files and folders skipped."""
    stack, seen = [(folder, parts)], 0
    while stack:
        folder, parts = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = []
                for entry in it:
                    seen += 1
                    if seen > budget:
                        yield parts, None, OVER_BUDGET
                        return
                    entries.append(entry)
        except OSError as e:
            yield parts, None, f"folder could not be listed ({e.strerror or e})"
            continue
        subfolders = []
        for entry in sorted(entries, key=lambda e: e.name):
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


def _nbgrader_time(text: str) -> tuple[dt.datetime | None, str]:
    """The time in an nbgrader timestamp.txt, and why there is none ("" when there is one).

    nbgrader writes `%Y-%m-%d %H:%M:%S.%f %Z` in its `Exchange.timezone`: UTC by default, else a zone's abbreviation
    (CET, EST, ...) or an offset. An abbreviation that names two zones (CST, IST, ...) or none known leaves the time
    unknown rather than guessed."""
    m = _NBGRADER_TIME.search(text[:200])
    if not m:
        return None, "no date in it"
    try:
        when = dt.datetime.fromisoformat(m.group(1).replace(" ", "T"))
    except ValueError:
        return None, f"{m.group(1)!r} is not a date"
    zone = (m.group(2) or "").strip()
    if zone.upper() in ("", "UTC", "Z", "GMT", "UT"):
        return when.replace(tzinfo=dt.timezone.utc), ""
    offset = re.fullmatch(r"(?:UTC|GMT)?([+-])(\d{2}):?(\d{2})", zone, re.I)
    if offset:
        sign = 1 if offset.group(1) == "+" else -1
        delta = dt.timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3)))
        return when.replace(tzinfo=dt.timezone(sign * delta)), ""
    if zone.upper() in ZONE_ABBREVIATIONS:
        hours = ZONE_ABBREVIATIONS[zone.upper()]
        return when.replace(tzinfo=dt.timezone(dt.timedelta(hours=hours))), ""
    if "/" in zone:  # a zone's name, as nbgrader's config takes it (Europe/Berlin)
        try:
            from zoneinfo import ZoneInfo
            return when.replace(tzinfo=ZoneInfo(zone)), ""
        except (ValueError, OSError, ImportError, KeyError):
            pass
    if zone.upper() in AMBIGUOUS_ZONES:
        return None, f"its zone {printable(zone, 20)!r} names several time zones ({AMBIGUOUS_ZONES[zone.upper()]})"
    return None, f"its zone {printable(zone, 20)!r} is not one the grader knows"


# The abbreviations nbgrader's `%Z` writes for the zones it is most often set to, as hours from UTC.
ZONE_ABBREVIATIONS = {
    "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2, "MET": 1, "MEST": 2, "EET": 2, "EEST": 3, "MSK": 3,
    "EST": -5, "EDT": -4, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8, "PDT": -7, "AKST": -9, "AKDT": -8,
    "HST": -10, "NST": -3.5, "NDT": -2.5, "AST": -4, "ADT": -3, "JST": 9, "KST": 9, "HKT": 8, "SGT": 8, "AWST": 8,
    "ACST": 9.5, "ACDT": 10.5, "AEST": 10, "AEDT": 11, "NZST": 12, "NZDT": 13, "PKT": 5, "WIB": 7, "SAST": 2,
    "CAT": 2, "EAT": 3, "WAT": 1, "BRT": -3, "ART": -3, "CLT": -4, "CLST": -3, "PHT": 8, "ICT": 7,
}
AMBIGUOUS_ZONES = {"CST": "US Central -6, China +8, Cuba -5", "IST": "India +5:30, Ireland +1, Israel +2"}


def _strip_resubmission(stem: str) -> tuple[str, int]:
    m = _RESUBMIT.search(stem)
    if not m:
        return stem, 0
    return stem[:m.start()], int(m.group(1) or m.group(2))


def _claim(parts: tuple[str, ...]) -> str | None:
    """The owner a path names below the layout's top level, where nothing may name one: an nbgrader
    `submitted/<student>/<assignment>/`, an LMS file name, a Moodle submission folder; or None."""
    for i, part in enumerate(parts[:-1]):
        if part == "submitted" and len(parts) - i >= 4:
            return parts[i + 1]
        m = _MOODLE.fullmatch(part)
        if m:
            return m.group("pid")
    m = _CANVAS.fullmatch(parts[-1]) if parts else None
    return m.group("uid") if m else None


def _classify(parts: tuple[str, ...], origin: str, nbgrader: bool = False) -> dict:
    """Who a file belongs to and which notebook it is, from its path relative to the folder (or zip) given.

    Only the layout's top level names an owner: a file at the top with an LMS name (Canvas's), a top-level folder (a
    home folder, a student's folder, a Moodle submission folder), or nbgrader's `submitted/<student>/` when the
    folder given is an nbgrader course folder (or its `submitted/`; then `nbgrader` is True). Anything deeper that
    looks like an owner is kept as `claim`, for the grader to report, and decides nothing."""
    filename = parts[-1]
    base = filename[:-len(".ipynb")] if filename.endswith(".ipynb") else filename
    # Outside an LMS download a "-1" or " (1)" suffix (a second browser download, a copy) says nothing of which file
    # came later, so only the LMS's suffix orders files; two files with nothing else between them are reported.
    stem = _strip_resubmission(base)[0]
    if nbgrader:
        inner = parts[1:] if parts[0] == "submitted" else parts
        if len(inner) < 2:
            return dict(key=None, layout="nbgrader", stem=stem, order=(0, 0))
        below = inner[2:] if len(inner) >= 3 else inner[1:]
        return dict(key=inner[0], layout="nbgrader", stem=stem, order=(0, 0), claim=_claim(below))
    if len(parts) == 1:
        m = _CANVAS.fullmatch(filename)
        if m:
            file = m.group("file")
            lms_stem, n = _strip_resubmission(file[:-len(".ipynb")] if file.endswith(".ipynb") else file)
            return dict(key=m.group("uid"), layout=f"{origin}lms", stem=lms_stem, late_flag=bool(m.group("late")),
                        order=(int(m.group("sid")), n), name_hint=m.group("name"))
        return dict(key=None, layout=origin or "file", stem=stem, order=(0, 0))
    m = _MOODLE.fullmatch(parts[0])
    if m:
        return dict(key=m.group("pid"), layout=f"{origin}moodle", stem=stem, order=(0, 0),
                    name_hint=m.group("name"), claim=_claim(parts[1:]))
    return dict(key=parts[0], layout=f"{origin}folder", stem=stem, order=(0, 0), claim=_claim(parts[1:]))


def _inherit(where: dict, owner: dict | None) -> dict:
    """A zip member's file name says which notebook it is; the zip's own place (an LMS name, a student's folder)
    says whose it is and when. A member whose path names an owner of its own keeps that only as a claim."""
    if owner is None or owner.get("key") is None:
        return where
    claim = where.get("claim") or (where["key"] if where["layout"].endswith(("lms", "moodle", "nbgrader")) else None)
    return {**where, "claim": claim, **{k: owner[k] for k in ("key", "layout", "late_flag", "order", "name_hint",
                                                              "submitted") if k in owner}}


def _zip_entries(zf: zipfile.ZipFile, display_root: str, keep_open: list, owner: dict | None = None,
                 nested: bool = False, budget: "_Budget | None" = None) -> tuple[list[Entry], list[str]]:
    """The notebooks in an open zip (and in zips inside it, one level down), never extracted.

    A zip that is the class's (no owner) may list up to MAX_FILES members, each top-level owner up to
    MAX_STUDENT_ENTRIES of them; a zip a student handed in counts against that student's budget."""
    keep_open.append(zf)
    budget = budget or _Budget()
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
        if not budget.take(where, member_name, entries):
            continue
        if parts[-1].endswith(".zip"):
            if nested:
                problems.append(f"{member_name}: a zip inside a zip inside a zip; not opened")
                continue
            content = _read_member(zf, info)
            if isinstance(content, str):
                problems.append(f"{member_name}: {content}")
                continue
            if not budget.take_bytes(where, member_name, len(content), entries):
                continue
            try:
                inner = zipfile.ZipFile(io.BytesIO(content))
            except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
                problems.append(f"{member_name}: not a readable zip file ({type(e).__name__})")
                continue
            found, more = _zip_entries(inner, member_name, keep_open, _inherit(_classify(parts, "zip:"), owner),
                                       nested=True, budget=budget)
            entries += found
            problems += more
            continue
        if not parts[-1].endswith(".ipynb"):
            continue
        entries.append(Entry(display=member_name, read=lambda info=info: _read_member(zf, info), **where))
    return entries, problems


class _Budget:
    """What one owner (a top-level folder, an LMS name) may cost while the files are found: entries looked at, and
    bytes of zips opened inside zips (held in memory). The first time an owner runs over, an entry saying so is
    added for them (their row shows it); the rest of their files are not looked at."""

    def __init__(self):
        self.entries: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.over: set[str] = set()

    def _flag(self, where: dict, shown: str, what: str, found: list) -> bool:
        key = where.get("key")
        if key not in self.over:
            self.over.add(key)
            found.append(_over_budget(where, shown, what))
        return False

    def take(self, where: dict, shown: str, found: list) -> bool:
        key = where.get("key")
        if key is None:
            return True
        if key in self.over:
            return False
        self.entries[key] = self.entries.get(key, 0) + 1
        if self.entries[key] > MAX_STUDENT_ENTRIES:
            return self._flag(where, shown, f"more than {MAX_STUDENT_ENTRIES:,} files", found)
        return True

    def take_bytes(self, where: dict, shown: str, size: int, found: list) -> bool:
        key = where.get("key")
        if key is None:
            return True
        if key in self.over:
            return False
        self.bytes[key] = self.bytes.get(key, 0) + size
        if self.bytes[key] > MAX_STUDENT_ZIP_BYTES:
            return self._flag(where, shown, f"zips inside zips of over {MAX_STUDENT_ZIP_BYTES >> 20} MB", found)
        return True


def _over_budget(where: dict, shown: str, what: str) -> Entry:
    """The entry that puts "over budget" on an owner's row: what ran over, and from which file on."""
    return Entry(display=shown, read=lambda: "", key=where.get("key"), layout=where.get("layout", "folder"), stem="",
                 name_hint=where.get("name_hint", ""),
                 problem=f"{what} handed in (the budget per student): from {shown} on, nothing more was looked at; "
                         "what was found before is graded, check the rest by hand")


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


def _units(given: Path, problems: list[str]) -> tuple[list[tuple[tuple[str, ...], os.DirEntry]], bool]:
    """The folder's top level, as the layout defines it: (parts, entry) of each file and folder at the top (for an
    nbgrader course folder, each student's folder in submitted/), and whether the folder is nbgrader's."""
    def listing(folder: Path, parts: tuple[str, ...]) -> list[tuple[tuple[str, ...], os.DirEntry]]:
        found = []
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    if len(found) >= MAX_FILES:
                        problems.append(f"{printable('/'.join(parts)) or printable(os.fsdecode(folder))}: more than "
                                        f"{MAX_FILES:,} entries at its top level; the rest were not looked at")
                        break
                    if not entry.name.startswith("."):
                        found.append(((*parts, entry.name), entry))
        except OSError as e:
            problems.append(f"{printable(os.fsdecode(folder))}: folder could not be listed ({e.strerror or e})")
        return sorted(found, key=lambda pe: pe[0])

    top = listing(given, ())
    if given.name == "submitted":
        return top, True
    submitted = [e for parts, e in top if parts == ("submitted",) and _is_dir(e)]
    if not submitted:
        return top, False
    others = [printable(parts[0], 60) for parts, _ in top if parts != ("submitted",)]
    if others:
        problems.append(f"{printable(os.fsdecode(given))}: an nbgrader course folder: only submitted/ is graded, not "
                        f"{', '.join(others[:5])}{', ...' if len(others) > 5 else ''}")
    return listing(Path(submitted[0].path), ("submitted",)), True


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def discover(paths: Iterable[str | Path], keep_open: list, file_times: bool = False) -> tuple[list[Entry], list[str]]:
    """Every notebook file under the paths given, and problems not tied to any one student.

    Folders are searched recursively (hidden ones skipped, links never followed), each top-level folder (a student's)
    with a budget of its own (MAX_STUDENT_ENTRIES); `.zip` files are read in place, each once. nbgrader's
    `timestamp.txt` in `submitted/<student>/<assignment>/` dates the notebooks of that submission; one anywhere else
    dates nothing. With `file_times`, a notebook without one is dated by its modification time (home folders copied
    with their times kept, `cp -p` or `rsync -a`). Open zip files are appended to `keep_open`; the caller closes them
    once every entry has been read. Raises FileNotFoundError for a path that does not exist.
    """
    entries, problems, zips_seen = [], [], set()
    budget = _Budget()

    def add_zip(path: Path, shown: str, owner: dict | None) -> None:
        real = os.path.abspath(path)  # not realpath: a link is reported under its own name, not its target's
        if real in zips_seen:
            return
        zips_seen.add(real)
        zf = _read_zip_handle(path)
        if isinstance(zf, str):
            problems.append(f"{shown}: {zf}")
            return
        found, more = _zip_entries(zf, shown, keep_open, owner, budget=budget)
        entries.extend(found)
        problems.extend(more)

    def add_file(parts: tuple[str, ...], entry: os.DirEntry, where: dict) -> None:
        shown = printable("/".join(parts))
        if parts[-1].endswith(".zip"):
            # An LMS download saved beside other files, or a zip a student handed in: its own name (or folder)
            # says whose notebooks are inside. A link or a FIFO named .zip is reported, never opened.
            add_zip(Path(entry.path), shown, where if where["key"] else None)
            return
        if file_times and where.get("submitted") is None:
            where["submitted"] = _mtime(entry)
        entries.append(Entry(display=shown, read=lambda p=entry.path: _read_regular(p), **where))

    for given in map(Path, paths):
        if not os.path.lexists(given):
            raise FileNotFoundError(given)
        if given.is_dir():
            units, nbgrader = _units(given, problems)
            for parts, top in units:
                if not _is_dir(top):
                    where = _classify(parts, "", nbgrader)
                    if top.name.endswith((".ipynb", ".zip")) and budget.take(where, printable(parts[-1]), entries):
                        add_file(parts, top, where)
                    continue
                found, stamps, owner = [], {}, None
                for sub_parts, entry, problem in _walk(Path(top.path), parts, MAX_STUDENT_ENTRIES):
                    if problem == OVER_BUDGET:
                        owner = owner or _classify((*sub_parts, "x.ipynb"), "", nbgrader)
                        found.append(("over", sub_parts, owner))
                        break
                    if problem:
                        problems.append(f"{printable('/'.join(sub_parts))}: {problem}")
                    elif sub_parts[-1] == "timestamp.txt":
                        stamps[sub_parts[:-1]] = entry
                    else:
                        found.append(("file", sub_parts, entry))
                for what, sub_parts, entry in found:
                    if what == "over":
                        entries.append(_over_budget(entry, printable("/".join(parts)) + "/",
                                                    f"more than {MAX_STUDENT_ENTRIES:,} files and folders"))
                        continue
                    where = _classify(sub_parts, "", nbgrader)
                    folder = _stamped_folder(sub_parts, nbgrader)
                    if folder is not None and folder in stamps:
                        when, why = _stamp_time(stamps[folder])
                        where["submitted"] = when
                        if why:
                            where["note"] = (f"{printable('/'.join(folder))}/timestamp.txt: {why}; the submission "
                                             "time is unknown, so lateness was not judged")
                    if budget.take(where, printable("/".join(sub_parts)), entries):
                        add_file(sub_parts, entry, where)
                for folder in stamps:
                    if _stamped_folder((*folder, "x.ipynb"), nbgrader) != folder:
                        where = _classify((*folder, "timestamp.txt"), "", nbgrader)
                        entries.append(Entry(display=printable("/".join((*folder, "timestamp.txt"))), read=lambda: "",
                                             stem="", **{k: where[k] for k in ("key", "layout")},
                                             note="a timestamp.txt that is not where nbgrader writes one "
                                                  "(submitted/<student>/<assignment>/): it dates nothing"))
        elif str(given).endswith(".zip"):
            add_zip(given, printable(given.name), None)
        else:
            where = _classify((given.parent.name, given.name) if given.parent.name else (given.name,), "")
            where.pop("claim", None)
            entries.append(Entry(display=printable(given.name), read=lambda p=given: _read_regular(p), **where))
    return entries, problems


def _stamped_folder(parts: tuple[str, ...], nbgrader: bool) -> tuple[str, ...] | None:
    """The folder whose nbgrader timestamp.txt dates a file: `submitted/<student>/<assignment>`, or None."""
    if not nbgrader:
        return None
    start = 1 if parts[0] == "submitted" else 0
    return parts[:start + 2] if len(parts) >= start + 3 else None


def _stamp_time(entry: os.DirEntry) -> tuple[dt.datetime | None, str]:
    text = _read_regular(entry.path)
    if isinstance(text, str):
        return None, text
    return _nbgrader_time(text[:200].decode("utf-8", "replace"))


def _mtime(entry: os.DirEntry) -> dt.datetime | None:
    try:
        return dt.datetime.fromtimestamp(entry.stat(follow_symlinks=False).st_mtime, dt.timezone.utc)
    except OSError:
        return None
